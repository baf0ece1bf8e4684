"""``perfsuite asv-offline``: a published asv site that works without internet."""
from __future__ import annotations

import argparse

from ...asv import project as asv_project
from .common import EXIT_OK, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("make a published asv site work without internet: its CDN scripts from Debian packages, in vendor/")


def add_asv_offline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help="asv config whose html_dir to rewrite [default: %(default)s]")
    p.add_argument("--html-dir", metavar="DIR", help="the published site [default: html_dir of the config]")


def do_asv_offline(args: argparse.Namespace) -> int:
    from ..asv_offline import make_offline

    html_dir = args.html_dir or asv_project.load_project(args.asv_config).html_dir
    names = make_offline(html_dir)
    say(f"# {html_dir}/index.html now loads {len(names)} CDN files from vendor/: {', '.join(names)}")
    return EXIT_OK


COMMANDS["asv-offline"] = (add_asv_offline, do_asv_offline, "make a published asv site work without internet")
