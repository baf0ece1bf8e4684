"""``perfsuite bisect``: the first commit between a good and a bad one that made a case slower."""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

from ... import bench
from .. import options
from ...reading import verdict_text as vt
from ...records.errors import ConfigError
from ...launch import envs
from ...launch.launchers import parse_env
from .ab import ab_config, shared, add_env_options, add_transport, add_judging, declares, note, one_benchmark, user_source
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, exit_status, one_value, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("find the commit between --good and --bad that made a case slower: A/B of the good end against each "
               "midpoint, in commits' own environments")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a first bad commit named",
         EXIT_UNKNOWN: "a step could not be decided (always: a bisection's one answer is the commit)",
         EXIT_WORLD: "a step's world failed or returned wrong results"}
#: The options --help shows with their help (the two ends, what each step runs); --help-all shows every one.
BRIEF = ("--good", "--bad", "--benchmarks", "--transports", "--max-pairs")


def add_bisect(p: argparse.ArgumentParser) -> None:
    p.add_argument("--good", required=True, metavar="REF", help="a commit known to be fast (the reference)")
    p.add_argument("--bad", required=True, metavar="REF", help="a later commit known to be slower")
    p.add_argument("--benchmarks", default="allreduce", metavar="NAME",
                   help=f"the benchmark each step runs: {', '.join(bench.names())}, or the module or .py file "
                   "that declares yours (@perfsuite.benchmark) [default: %(default)s]")
    add_transport(p, "each step runs")
    options.add_options(p.add_argument, names=[n for n in shared() if n != "transports"])
    add_judging(p)
    add_env_options(p)


def do_bisect(args: argparse.Namespace) -> int:
    from ...experiments import ab
    from ...experiments import bisect as b

    values = vars(args)
    name = one_benchmark(args.benchmarks, "bisect")
    default = bench.default_transport(name)  # a user benchmark's own, as ab's and run's default is
    transport = one_value(args.transports or default, "--transports", "bisect", default)
    arm = ab.Arm("A", transport, tuple(parse_env(values["env"] or []).items()))
    cfg, suite_cfg = ab_config(values, name, arm, replace(arm, name="B"))
    # A step is bad once one case is a DIFFERENT regression: its other cases cannot change that.
    cfg = replace(cfg, stop_on_regression=True)
    extras = envs.check_extras(args.extras)
    repo = envs.repo_root()
    good, bad = envs.resolve(repo, args.good), envs.resolve(repo, args.bad)
    commits = envs.commits_between(repo, good, bad)
    if not commits:
        raise ConfigError(f"--good {args.good} and --bad {args.bad} are the same commit; give an older --good")
    source = user_source(name)
    if relfile := (source or {}).get("relfile"):
        held(repo, relfile, name, [(f"--good {args.good}", good), *(("commit", c) for c in commits[:-1]),
                                   (f"--bad {args.bad}", bad)])
    project = envs.project_dir(repo, args.project_dir)
    build = lambda ref: envs.build(repo, ref, extras=extras, env_dir=args.env_dir, progress=note,  # noqa: E731
                                   project=project)
    good_env = build(good)
    a = cfg.a.from_commit(good_env)
    if source is not None:
        # Only the cases both ends declare are searched (the bad end is built here, once, for
        # its first step): a case one end lacks fails every world of that end.
        at_good, at_bad = declares(good_env, source), declares(build(bad), source)
        keep = [i for i, c in enumerate(cfg.cases_a) if at_good(c) and at_bad(c)]
        if not keep:
            raise ConfigError(f"benchmark {name!r}: none of its {len(cfg.cases_a)} selected case(s) is declared "
                              f"both at --good {args.good} ({good[:10]}) and at --bad {args.bad} ({bad[:10]})")
        cfg = replace(cfg, cases_a=tuple(cfg.cases_a[i] for i in keep), cases_b=tuple(cfg.cases_b[i] for i in keep))
    runner = ab.world_runner(replace(suite_cfg, rounds=None))
    started = time.monotonic()
    say(f"# bisect: {len(commits)} commits after {good[:10]} up to {bad[:10]}, {len(cfg.cases_a)} case(s), "
        f"up to {cfg.max_pairs} pairs a step")

    def probe(commit: str, cases, tolerance) -> b.Step:
        keep = [i for i, c in enumerate(cfg.cases_a) if cases is None or c.name in cases]
        step_cfg = replace(cfg, a=a, b=cfg.b.from_commit(build(commit)), tolerance=tolerance or cfg.tolerance,
                           cases_a=tuple(cfg.cases_a[i] for i in keep), cases_b=tuple(cfg.cases_b[i] for i in keep))
        say(f"# step: {a.ref} (A) vs {step_cfg.b.ref} (B)")
        rep = ab.run(step_cfg, runner, progress=note)
        say(ab.format_report(rep))
        return b.Step(commit, b.classify(rep.verdicts, rep.failures, cases, rep.invalid), rep.verdicts,
                      rep.failures, rep.pairs, rep.wall_s, rep.invalid)

    # A tolerance the user set holds for every step; else the midpoints' grows with the regression.
    found = b.search(commits, probe, progress=note, least=None if args.tolerance else cfg.tolerance)
    say(format_bisection(found, repo, cfg.alpha, time.monotonic() - started))
    return bisect_status(found)


def held(repo, relfile: str, name: str, points) -> None:
    """One line (exit 2) where a commit bisect would measure (``points``: (what, commit), in
    history's order, the bad end last) has no ``relfile``: the first such, and where it came in."""
    for what, commit in points:
        if envs.tree_has(repo, commit, relfile):
            continue
        bad_end = commit == points[-1][1]
        added = None if bad_end else envs.added_by(repo, points[-1][1], relfile)
        since = (": name a --bad whose tree has it" if bad_end else
                 f": give a --good at or after {added[:10]}, the commit that added it" if added else "")
        raise ConfigError(f"{what} ({commit[:10]}) has no {relfile} in its tree (benchmark {name!r}); "
                          f"bisect measures it at every step{since}")


def _subject(repo, commit: str) -> str:
    return envs.commit_subject(repo, commit)


def format_bisection(found, repo, alpha: float, seconds: float) -> str:
    from ...experiments import bisect as b

    lines = [f"# {len(found.steps)} steps, {seconds:.0f} s; each step's verdicts at alpha {alpha:g} "
             f"(a wrong turn somewhere: at most {len(found.steps) * alpha:.2g})"]
    if found.first_bad:
        c = found.first_bad.commit
        lines.append(f"first bad commit: {c[:10]} {_subject(repo, c)}")
        lines += [f"  {v.case} {vt.short(v.metric)}: B/A {vt.ratio(v.change)} {vt.interval(v, as_ratio=True)}"
                  for v in found.first_bad.regressed]
        return "\n".join(lines)
    stop = found.stopped
    if stop is None:
        return "\n".join(lines + ["nothing to search"])
    if stop is found.steps[0] and stop.outcome == b.GOOD:
        lines.append(f"no regression: the bad end {stop.commit[:10]} is not slower than the good end "
                     "(every case SAME or better)")
    else:
        # A wrong result is named once, by the INVALID line in the step's report above.
        from ...experiments.repeats import collapse

        failed = collapse(stop.failures) + (["wrong results: the INVALID line above"] if stop.invalid else [])
        why = "; ".join(failed) or ", ".join(
            f"{v.case} {v.kind}" for v in stop.verdicts if v.kind != "SAME") or "no case was judged"
        lines.append(f"could not decide at {stop.commit[:10]} ({why}); the first bad commit is one of: "
                     + " ".join(c[:10] for c in found.candidates))
        if not failed:
            lines.append("# more pairs (--max-pairs, --budget) or a quieter machine may decide it")
    return "\n".join(lines)


def bisect_status(found) -> int:
    """1: a commit named (a regression found); 0: the bad end is no slower; 3: a step could not
    be decided; 4: a world failed or returned wrong results."""
    from ...experiments import bisect as b

    stop = found.stopped
    failed = stop is not None and stop.outcome == b.FAILED
    decided = found.first_bad or failed or (stop is not None and stop.outcome == b.GOOD)
    return exit_status(EXIT_REGRESSION if found.first_bad else EXIT_OK, EXIT_WORLD if failed else EXIT_OK,
                       EXIT_OK if decided else EXIT_UNKNOWN)


COMMANDS["bisect"] = (add_bisect, do_bisect, "find the commit between --good and --bad that slowed a case")
