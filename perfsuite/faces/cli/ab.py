"""``perfsuite ab``: two arms measured now, interleaved, judged pair by pair."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ... import bench, suite
from .. import options
from ...verdicts import decision
from ...store import formats
from ...records.errors import ConfigError
from ...launch import containers, envs
from ...launch.launchers import parse_env
from ...experiments.ab import DEFAULT_MAX_PAIRS, DEFAULT_TOLERANCE
from ...records.model import split_list, whole_number
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, add_gating, alpha_help, exit_status, one_value, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("compare two arms (transport, env, venv, commit, image, launcher args) in interleaved pairs in random "
               "order: B/A with its interval and SAME/DIFFERENT/UNKNOWN")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a case DIFFERENT: B slower than A",
         EXIT_UNKNOWN: "--strict: a case left UNKNOWN, nothing judged (stopped before the first look), or a case only one arm's tree declares",
         EXIT_WORLD: "a world failed or returned wrong results (its pairs are no evidence), or the A/B file could not be written"}
#: The options --help shows with their help (what each arm is, and how long the pairs run); --help-all shows every one.
BRIEF = ("--benchmarks", "--transports", "--sizes", "--a-ref", "--b-ref", "--b-env", "--strict")
LAUNCH = ("transports", "world-sizes", "launcher", "launcher-program", "mpi-flavor", "hostfile", "hosts", "ppn",
          "oversubscribe", "env", "emulated-network", "timeout", "start-timeout", "iters", "warmup", "max-time", "workdir",
          "max-contention", "max-canary-shift")


def shared() -> tuple[str, ...]:
    """What both arms run with: the launch's options and every option a benchmark's cases read
    (its sizes, models, parallelism, precision...), so an arm runs any case ``perfsuite run`` can;
    but never unchecked results (``--no-validate``): a gate judges checked worlds only. Asked when
    the parser is built, not on import, so a benchmark that fails to import is one line."""
    return LAUNCH + tuple(dict.fromkeys(o.name for s in bench.all_specs() if s.cases is not None
                                        for o in s.options if o.name not in LAUNCH + ("no-validate",)))


def add_ab(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="NAME",
                   help=f"the benchmark both arms run: one of perfsuite's ({', '.join(bench.names()[:2])}, ...: "
                   "perfsuite run --help-all lists them), or the module or .py file that declares yours "
                   "(@perfsuite.benchmark) [default: %(default)s]")
    add_transport(p, "both arms run")
    options.add_options(p.add_argument, names=[n for n in shared() if n != "transports"])
    for arm in ("a", "b"):
        up = arm.upper()
        p.add_argument(f"--{arm}-transport", metavar="NAME", help=f"arm {up}'s transport [default: --transports]")
        p.add_argument(f"--{arm}-env", action="append", default=[], metavar="NAME=VALUE",
                       help=f"a variable set for arm {up}'s ranks (repeatable)")
        p.add_argument(f"--{arm}-python", metavar="PATH", help=f"arm {up}'s Python (another venv; "
                       "its mpiexec is used when one lies beside it)")
        p.add_argument(f"--{arm}-ref", metavar="REF", help=f"arm {up} runs this commit (main, HEAD~1, a sha) of the "
                       "repository you run in, built into an environment of its own before the first pair")
        p.add_argument(f"--{arm}-launcher-args", metavar="ARGS", help=f"extra launcher arguments for arm {up}")
        p.add_argument(f"--{arm}-image", metavar="IMAGE", help=f"arm {up}'s whole world runs inside this container "
                       "image, with the image's mpiexec, Python (--a-python names another there) and perfsuite")
        p.add_argument(f"--{arm}-prefix", metavar="CMD", help=f"arm {up}'s launch runs under this command (any "
                       "isolation tool; {folder} and {cwd} in it stand for the world's scratch folder and the "
                       "working directory), e.g. 'apptainer exec --bind {folder} IMG'")
    p.add_argument("--container-runtime", metavar="NAME", help="what runs an --a-image/--b-image: podman, docker, "
                   "apptainer or singularity [default: the first on PATH]")
    p.add_argument("--container-args", metavar="ARGS", help="more options for the runtime's run, split like a "
                   "shell: '--device nvidia.com/gpu=all'")
    add_judging(p)
    p.add_argument("--json", metavar="PATH", help="write the versioned A/B file here")
    add_gating(p, improvements=False)  # an improvement is no failure of an A/B
    p.add_argument("--stop-on-regression", action="store_true", help="stop at the first look where a "
                   "case is a DIFFERENT regression (exit 1 is settled there; other cases may stay UNKNOWN)")
    add_env_options(p)


def add_transport(p: argparse.ArgumentParser, who: str) -> None:
    """One transport, not run's list: a comparison is of one transport (an arm names another)."""
    p.add_argument("--transports", metavar="NAME", help=f"the one transport {who} [default: the first a "
                   "user benchmark declares (@perfsuite.benchmark(transports=...)), else mpi]")


def add_env_options(p: argparse.ArgumentParser) -> None:
    """Where commits' environments are built, and with what: ab's refs and bisect's steps."""
    p.add_argument("--env-dir", metavar="DIR", help=f"where commits' environments are built and kept "
                   f"[default: ${envs.ENV_DIR_ENV}, else $XDG_CACHE_HOME/perfsuite/envs (~/.cache/perfsuite/envs), "
                   "a folder per repository]")
    p.add_argument("--extras", metavar="LIST", help="extras of the repository's project (its pyproject.toml's "
                   "[project] name; test,tf for perfsuite) installed from each commit [default: those of it "
                   "installed here]")
    p.add_argument("--project-dir", metavar="DIR", help="the folder of the repository that holds the project "
                   "each commit installs (a monorepo's train/) [default: the nearest folder from here up to the "
                   "repository's top with a pyproject.toml, setup.cfg or setup.py]")


def note(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def user_source(name: str) -> dict | None:
    """Where a user benchmark's ranks find it (its worlds' ``user_benchmark`` option: module,
    function, file and that file's path in the repository), or None for a built-in one."""
    return (bench.get(name).world_options or {}).get("user_benchmark")


def declares(env: envs.CommitEnv, source: dict | None):
    """Whether ``env``'s commit declares a case of the user benchmark ``source``: read in that
    environment, as its ranks read it (every case where it cannot tell, or for a built-in)."""
    found = envs.declared_at(env, source) if source is not None else {}
    if "missing" in found:
        note(f"{env.describe()}: declares no benchmark {source.get('name')!r} ({found['missing']})")
        return lambda case: False
    if not found:
        return lambda case: True
    transports, variants = set(found["transports"]), set(found["variants"])
    return lambda case: case.transport in transports and case.variant in variants


def commit_arms(args: argparse.Namespace, cfg, name: str, refs: dict[str, str]):
    """``cfg`` with the arms that run commits (``refs``: "A"/"B" -> ref) ready before the first
    pair: every ref resolved first (a bad one is exit 2 before anything is built), the
    benchmark's file looked up in each ref's tree (git, no build: a tree without it builds
    nothing), each commit built once, and what each built tree declares of the benchmark read
    there; a case only B's tree declares is new, one only A's is missing (``ab.split_declared``).
    One line (exit 2) where neither ref's tree holds the benchmark's file."""
    from ...experiments import ab

    if not refs:
        return cfg
    extras = envs.check_extras(args.extras)
    repo = envs.repo_root()
    project = envs.project_dir(repo, args.project_dir)
    commits = {arm: envs.resolve(repo, ref) for arm, ref in refs.items()}
    source = user_source(name)
    relfile = (source or {}).get("relfile")
    lacking = [arm for arm, commit in commits.items() if relfile and not envs.tree_has(repo, commit, relfile)]
    if len(lacking) == 2:
        raise ConfigError(f"benchmark {name!r}: neither --a-ref {refs['A']} ({commits['A'][:10]}) nor --b-ref "
                          f"{refs['B']} ({commits['B'][:10]}) has {relfile} in its tree; commit the file, or name "
                          "a ref whose tree has it")
    arms, at = {"A": cfg.a, "B": cfg.b}, {}
    for arm, ref in refs.items():
        if arm in lacking:
            note(f"{ref} ({commits[arm][:10]}): its tree has no {relfile}: benchmark {name!r} is "
                 + ("new in B (measured, not compared)" if arm == "A" else "missing in B (not measured)"))
            arms[arm], at[arm] = replace(arms[arm], ref=f"{ref} ({commits[arm][:10]})"), (lambda case: False)
            continue
        env = envs.build(repo, ref, extras=extras, env_dir=args.env_dir, progress=note, project=project)
        arms[arm], at[arm] = arms[arm].from_commit(env), declares(env, source)
    cfg = replace(cfg, a=arms["A"], b=arms["B"])
    if source is None:
        return cfg
    return ab.split_declared(cfg, at.get("A", lambda case: True), at.get("B", lambda case: True),
                             f" (benchmark {name!r} at {', '.join(f'{r} ({commits[a][:10]})' for a, r in refs.items())})")


def one_benchmark(text: str, command: str) -> str:
    """``--benchmarks`` of ab and bisect: one benchmark, by its name (a built-in, or one of yours
    registered by your package's entry point or PERFSUITE_BENCHMARKS), or the module or .py
    file that declares it (``bench.selected``)."""
    items = split_list(text, "benchmarks", "allreduce")
    names = bench.selected(items)
    if len(names) != 1:
        listed = f" ({', '.join(names)})" if names else ""
        # A file or module declaring several is registered by PERFSUITE_BENCHMARKS, and one of
        # its benchmarks then named as a built-in is.
        files = [i for i in items if bench.is_source(i)]
        how = (f"register {'them' if len(files) > 1 else 'it'} and name one: {bench.ENV}={','.join(files)} "
               f"perfsuite {command} --benchmarks {names[0]}" if files and names else
               f"e.g. --benchmarks {names[0] if names else 'allreduce'}")
        raise ConfigError(f"--benchmarks {text!r} names {len(names) or 'no'} benchmarks{listed}; perfsuite "
                          f"{command} takes one value; {how}")
    if names[0] not in bench.names():
        raise ConfigError(f"benchmark {names[0]!r} is unknown; choose from {', '.join(bench.names())}, or name "
                          "the module or .py file that declares yours")
    return names[0]


def do_ab(args: argparse.Namespace) -> int:
    from ...experiments import ab

    values = vars(args)
    name = one_benchmark(args.benchmarks, "ab")
    arms = []
    default = bench.default_transport(name)  # a user benchmark's own, as run's default is
    for arm in ("a", "b"):
        given = values[f"{arm}_transport"]
        transport = (one_value(given, f"--{arm}-transport", "ab", default) if given
                     else one_value(args.transports or default, "--transports", "ab", default))
        python = values[f"{arm}_python"]
        if python and values[f"{arm}_ref"]:
            raise ConfigError(f"--{arm}-python {python} and --{arm}-ref {values[f'{arm}_ref']} both name "
                              f"arm {arm.upper()}'s Python; give one")
        box = stack_of(values, arm)
        if python and box is None:
            envs.check_python(python)
        arms.append(ab.Arm(arm.upper(), transport, tuple(parse_env(values[f"{arm}_env"]).items()),
                           python, options.launcher_args(values[f"{arm}_launcher_args"]), container=box))
    if any(a.container is not None for a in arms) and values.get("host_timing") in (None, "auto"):
        # The native loop is built here, for this machine's MPI: an image's ranks cannot load it,
        # and two arms timed by two loops are not compared. Both arms take the mpi4py loop.
        values = {**values, "host_timing": "python"}
        say("# host timing: python for both arms (an arm runs in a container, where the native loop built here is not)")
    cfg, suite_cfg = ab_config(values, name, arms[0], arms[1])
    cfg = commit_arms(args, cfg, name, {a.name: values[f"{a.name.lower()}_ref"] for a in arms
                                        if values[f"{a.name.lower()}_ref"]})
    cfg = replace(cfg, **{a.name.lower(): replace(a, stack=containers.probe(
        a.container, a.python or (containers.PYTHON if a.container.image else sys.executable)))
        for a in (cfg.a, cfg.b) if a.container is not None})
    one_armed = "".join(f", {len(x)} {word} (only {arm}'s tree declares them)"
                        for x, word, arm in ((cfg.new, "new", "B"), (cfg.missing, "missing", "A")) if x)
    say(f"# A/B: {len(cfg.cases_a)} case(s){one_armed}, up to {cfg.max_pairs} pairs ...")
    rep = ab.run(cfg, ab.world_runner(replace(suite_cfg, rounds=None)),
                 progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    say(ab.format_report(rep))
    return exit_status(ab_status(rep, args.strict), write_kept(args.json, formats.AB, rep.to_dict(), "ab", "A/B"))


def stack_of(values: dict, arm: str):
    """Arm ``arm``'s container (``--a-image``, ``--a-prefix``), or None; one line where it
    names two stacks or the runtime is missing."""
    image, prefix, ref = values.get(f"{arm}_image"), values.get(f"{arm}_prefix"), values.get(f"{arm}_ref")
    named = [f"--{arm}-{w}" for w, v in (("image", image), ("prefix", prefix), ("ref", ref)) if v]
    if len(named) > 1:
        raise ConfigError(f"{' and '.join(named)} both name arm {arm.upper()}'s stack; give one")
    run_args = options.launcher_args(values.get("container_args"))
    if image:
        runtime = values.get("container_runtime")
        runtime = containers.check_runtime(runtime) if runtime else containers.default_runtime()
        return containers.Container(runtime, image, run_args=run_args)
    if prefix:
        return containers.Container(prefix=containers.parse_prefix(prefix, f"--{arm}-prefix"))
    return None


def write_kept(path: str | None, fmt: str, body: dict, command: str, what: str) -> int:
    """Write a command's versioned file after its worlds ran; where ``path`` fails (a read-only
    mount, a full disk), one line naming it and the OS error, the file kept in the temp folder
    where it can be, and 4 (what was measured could not be kept where asked); else 0."""
    if not path:
        return EXIT_OK
    where, why = formats.write_json_kept(path, formats.stamp(fmt, body), f"perfsuite-{command}.json")
    if why is None:
        say(f"# {what} written to {where}")
        return EXIT_OK
    kept = f"the {what} file is in {where} instead" if where else "nothing was kept"
    print(f"perfsuite {command}: {why}; {kept}", file=sys.stderr, flush=True)
    return EXIT_WORLD


def ab_config(values: dict, name: str, a, b):
    """(ABConfig, SuiteConfig) of benchmark ``name`` for arms ``a`` and ``b`` from the options."""
    from ...experiments import ab

    cases = []
    for arm in (a, b):
        sel = options.selection({**values, "transports": arm.transport}, name)
        if not sel.transports:
            raise ConfigError(f"transport {arm.transport!r} does not run {name}")
        cases.append(tuple(suite.select_cases(sel)))
    tol = decision.parse_tolerance(values["tolerance"]) if values.get("tolerance") else ab.DEFAULT_TOLERANCE
    budget = options.seconds(values["budget"], "budget") if values.get("budget") is not None else None
    given = options.with_defaults(values)  # each shared option's default is its own (options.COMMON)
    cfg = ab.ABConfig(a, b, cases[0], cases[1],
                      max_pairs=whole_number(values["max_pairs"], "max pairs", low=2), budget_s=budget,
                      tolerance=tol, alpha=decision.parse_alpha(values.get("alpha")),
                      max_contention=options.contention_limit(given["max_contention"]),
                      canary_shift=options.canary_limit(given["max_canary_shift"]),
                      seed=whole_number(values.get("seed"), "seed", low=0), judged=bench.get(name).judged,
                      stop_on_regression=bool(values.get("stop_on_regression")))
    return cfg, options.suite_config({**values, "transports": a.transport})


def add_judging(p: argparse.ArgumentParser) -> None:
    """How long pairs run and what they must resolve: ab's and each bisect step's."""
    p.add_argument("--max-pairs", default=str(DEFAULT_MAX_PAIRS), metavar="N",
                   help="pairs at most [default: %(default)s]")
    p.add_argument("--budget", metavar="S", help="seconds at most (stops after the pair running then)")
    p.add_argument("--tolerance", metavar="TOL", help=f"0.02 or LOWER:UPPER [default: {tolerance_text(DEFAULT_TOLERANCE)}]")
    p.add_argument("--alpha", metavar="P", help=alpha_help("split over the cases and the looks"))
    p.add_argument("--seed", metavar="N", help="seed of the pairs' order [default: random]")


def tolerance_text(t) -> str:
    """A tolerance as --tolerance takes it: 0.02, or LOWER:UPPER where it is not symmetric."""
    return f"{t.upper:g}" if t.lower == -t.upper else f"{t.lower:g}:{t.upper:g}"


def ab_status(rep, strict: bool) -> int:
    """A failed world or a wrong result first (its pairs are missing or no evidence: the
    comparison is not to be trusted), then a regression, then, under --strict, a case left
    UNKNOWN, nothing judged (stopped before the first look), or a case only one arm's tree
    declares (new or missing: not compared). An improvement is no failure."""
    undecided = not rep.verdicts or any(v.kind == "UNKNOWN" for v in rep.verdicts) or rep.config.new or rep.config.missing
    return exit_status(EXIT_WORLD if rep.failures or rep.invalid else EXIT_OK,
                       EXIT_REGRESSION if any(v.is_failure for v in rep.verdicts) else EXIT_OK,
                       EXIT_UNKNOWN if strict and undecided else EXIT_OK)


COMMANDS["ab"] = (add_ab, do_ab, "compare two arms in interleaved pairs: B/A and its verdict")
