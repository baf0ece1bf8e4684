"""``perfsuite validity``: the verdict rules' false-alarm and detection rates on synthetic
sessions, through the code the commands run."""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

from ...store import formats
from ...records.model import whole_number
from .common import EXIT_OK, EXIT_REGRESSION, fraction, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("the verdict rules' false-alarm and detection rates on synthetic sessions, through the code the commands run")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a rule's false-alarm rate above its bound"}
#: The options --help shows with their help (which rules, how many runs, what change); --help-all shows every one.
BRIEF = ("--mode", "--runs", "--change", "--cases", "--json")


def add_validity(p: argparse.ArgumentParser) -> None:
    from ...experiments import validity as v

    p.add_argument("--mode", default="both", choices=("stored", "ab", "both"),
                   help="the rules measured: stored (run --compare's, against a baseline), ab (perfsuite ab's "
                        "pairs) or both [default: %(default)s]")
    p.add_argument("--runs", default=str(v.DEFAULT_RUNS), metavar="N",
                   help="seeded runs per setting [default: %(default)s]")
    p.add_argument("--within", default=",".join(f"{x:g}" for x in v.WITHIN), metavar="LIST",
                   help="within-session spreads, fractions [default: %(default)s]")
    p.add_argument("--lag1", default=",".join(f"{x:g}" for x in v.LAG1), metavar="LIST",
                   help="lag-1 correlations of rounds [default: %(default)s]")
    p.add_argument("--sessions", default=",".join(f"{x:g}" for x in v.SESSION), metavar="LIST",
                   help="SD of the drift between sessions, fractions [default: %(default)s]")
    p.add_argument("--mode-step", default="0", metavar="F",
                   help="a slow machine mode this much slower (0.65: x1.65), its canary 1.65x [default: %(default)s]")
    p.add_argument("--switch", default="0.1", metavar="F",
                   help="with --mode-step: the chance per world that the mode changes [default: %(default)s]")
    p.add_argument("--canary-blind", action="store_true",
                   help="with --mode-step: the canary does not see the modes (a machine whose canary misses its states)")
    p.add_argument("--shared", default="0", metavar="F",
                   help="SD of a session's drift common to every case (the machine's state), a fraction "
                        "[default: %(default)s]")
    p.add_argument("--case-spread", default="0", metavar="F",
                   help="cases drift unalike: each case's own session drift scaled by exp(F z) [default: %(default)s]")
    p.add_argument("--spells-shared", action="store_true",
                   help="with --mode-step: one spell for the whole machine, every case in it at once")
    p.add_argument("--change", default="0", metavar="F",
                   help="a real change of the candidate (arm B), e.g. 0.3: the rate it is caught "
                        "[default: %(default)s, the false-alarm rate]")
    p.add_argument("--cases", default="1", metavar="N", help="cases judged in each run, one family [default: %(default)s]")
    p.add_argument("--baseline-sessions", default="1", metavar="K",
                   help="stored mode: sessions the baseline holds (--baseline-add) [default: %(default)s]")
    p.add_argument("--back-to-back", action="store_true",
                   help="stored mode: the baseline's sessions and the candidate recorded minutes apart (one "
                        "sitting, a spell going on), not an hour apart (each its own sitting)")
    p.add_argument("--confirm", action="store_true",
                   help="stored mode: then --confirm, as run --compare --confirm: an A/B (of at most 200 pairs) on "
                        "the machine as it is now decides the UNKNOWN cases and the DIFFERENT ones from few sittings")
    p.add_argument("--seed", default="0", metavar="N", help="seed of the first machine's runs; each next machine "
                   "takes the next [default: %(default)s]")
    p.add_argument("--json", metavar="PATH", help="write the versioned table here")


def _floats(text: str, what: str) -> list[float]:
    from ...records.model import split_list

    return [fraction(x, what) for x in split_list(text, what, "0.01,0.02")]


def do_validity(args: argparse.Namespace) -> int:
    from ...experiments import ab, validity as v

    runs = whole_number(args.runs, "runs")
    kw = {"change": fraction(args.change, "change"), "n_cases": whole_number(args.cases, "cases")}
    sessions = whole_number(args.baseline_sessions, "baseline sessions")
    machines = v.grid(_floats(args.within, "within"), _floats(args.lag1, "lag1"), _floats(args.sessions, "sessions"))
    step = fraction(args.mode_step, "mode-step")
    if step:
        machines = [replace(m, mode_step=math.log1p(step), switch=fraction(args.switch, "switch"),
                            canary_sees=not args.canary_blind, spells_shared=args.spells_shared) for m in machines]
    machines = [replace(m, shared_sd=fraction(args.shared, "shared"),
                        case_spread=fraction(args.case_spread, "case spread")) for m in machines]
    modes = ("stored", "A/B") if args.mode == "both" else (("stored",) if args.mode == "stored" else ("A/B",))
    say(f"# validity: {len(machines)} synthetic machine(s) x {len(modes)} mode(s), {runs} seeded runs each, "
        "judged by the code the commands run")
    rates = []
    for mode in modes:
        for i, m in enumerate(machines):
            extra = ({"sessions": sessions, "apart": not args.back_to_back,
                      "confirm_pairs": ab.DEFAULT_MAX_PAIRS if args.confirm else 0} if mode == "stored" else {})
            rates.append(v.rate(mode, m, runs, seed=whole_number(args.seed, "seed", low=0) + i,
                                workers=v.cores(), **kw, **extra))
            print(f"# {mode} {m.label()}: {rates[-1].hits}/{runs}", file=sys.stderr, flush=True)
    say(v.table(rates))
    if args.json:
        formats.write_json(args.json, formats.stamp(formats.VALIDITY, {"rates": [r.to_dict() for r in rates]}))
        say(f"# table written to {args.json}")
    clean = [r for r in rates if r.condition == "clean"]
    # A rule whose false alarms exceed its bound is the rules' own regression: a gate tripped.
    return EXIT_REGRESSION if any(r.rate > v.BOUND for r in clean) else EXIT_OK


COMMANDS["validity"] = (add_validity, do_validity, "the verdict rules' error rates on synthetic sessions")
