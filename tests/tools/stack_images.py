"""Builds the images tests/test_image_arms.py runs A/B arms in, without a registry (podman).

  localhost/perfsuite-test-base:bookworm   Debian bookworm minbase with python3, python3-venv and
                                           ca-certificates (debootstrap, then ``podman import``)
  localhost/perfsuite-test:mpich-4.2.3     a venv at /opt/venv, first on PATH (its python3 and
  localhost/perfsuite-test:mpich-5.0.2     mpiexec are the image's), holding perfsuite built from
                                           this tree, its dependencies from PyPI, and that mpich

Idempotent: an image is built only when missing or when its label ``perfsuite.test.key`` differs
from what it would be now. The base's key is its recipe's hash; an MPI image's key covers the
content of the perfsuite wheel built from this tree (so a changed tree rebuilds it), the
Containerfile and the base image's id. The layers that install perfsuite's dependencies
(numpy, scipy, matplotlib, mpi4py ...: the big one) come first and are the same for both images,
so podman builds them once and keeps them for the next build; perfsuite itself is the next
layer, and ``pip install mpich==X`` the last. mpich is left out of the dependency layer, so that
layer holds no MPI at all.

The host's CA bundle is mounted at build time, never baked in (this network's egress proxy
re-signs TLS), and a pip cache on the host is mounted so a rebuilt layer downloads nothing twice
(where the index's answers may be cached: this network's proxy drops PyPI's caching headers, so
here podman's layer cache is what makes a rebuild fast).
Podman on the CI machine kind needs .ci/containers.conf (.ci/run installs it).

Usage: python tests/tools/stack_images.py [--mpich 4.2.3,5.0.2] [--force]
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = "localhost/perfsuite-test-base:bookworm"
REPO = "localhost/perfsuite-test"
MPICH = ("4.2.3", "5.0.2")
LABEL = "perfsuite.test.key"
SUITE = "bookworm"
PACKAGES = "python3,python3-venv,ca-certificates"
#: The host's CA bundle, mounted (read-only) at build time where it exists.
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
#: Serializes builders on one machine: two test sessions must not build the same tags at once.
LOCK = Path(tempfile.gettempdir()) / "perfsuite-stack-images.lock"

#: The MPI images' recipe; {mpich} is the only difference between them, on the last RUN.
CONTAINERFILE = """\
FROM {base}
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY requirements.txt /opt/perfsuite-requirements.txt
# pip's certificates: the host's bundle where the build mounted it (it is not kept in the image)
RUN python3 -m venv /opt/venv \\
 && if [ -f /run/host-ca.crt ]; then export PIP_CERT=/run/host-ca.crt; fi \\
 && pip install -q --disable-pip-version-check --cache-dir /run/pip-cache -r /opt/perfsuite-requirements.txt
COPY {wheel} /opt/{wheel}
RUN pip install -q --disable-pip-version-check --no-deps /opt/{wheel}
RUN if [ -f /run/host-ca.crt ]; then export PIP_CERT=/run/host-ca.crt; fi \\
 && pip install -q --disable-pip-version-check --cache-dir /run/pip-cache "mpich=={mpich}" \\
 && pip check
"""


def image(mpich: str) -> str:
    return f"{REPO}:mpich-{mpich}"


def run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """``argv``, failing with its output's end when it fails."""
    got = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if got.returncode:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed (exit {got.returncode}):\n"
                           f"{got.stdout[-2000:]}\n{got.stderr[-3000:]}")
    return got


def label(runtime: str, name: str) -> str | None:
    """The image's key label, or None when there is no such image."""
    got = subprocess.run([runtime, "image", "inspect", "--format", f'{{{{index .Labels "{LABEL}"}}}}', name],
                         capture_output=True, text=True, timeout=60)
    return got.stdout.strip() if got.returncode == 0 else None


def image_id(runtime: str, name: str) -> str | None:
    got = subprocess.run([runtime, "image", "inspect", "--format", "{{.Id}}", name],
                         capture_output=True, text=True, timeout=60)
    return got.stdout.strip() if got.returncode == 0 else None


def drop_replaced(runtime: str, old: str | None, name: str) -> None:
    """The image a rebuild replaced, now untagged: removed, so rebuilds do not fill the disk
    (left where a container still uses it)."""
    if old and old != image_id(runtime, name):
        subprocess.run([runtime, "rmi", old], capture_output=True, timeout=120)


def mirror() -> str:
    """The Debian mirror this machine's apt uses (a local one where there is), else Debian's."""
    given = os.environ.get("DEBOOTSTRAP_MIRROR")
    if given:
        return given
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":  # deb822: URIs: ... Suites: bookworm ...
            for stanza in text.split("\n\n"):
                uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                if uris and re.search(rf"^Suites:.*\b{SUITE}\b", stanza, re.M) and "security" not in uris[1]:
                    return uris[1]
        else:
            for m in re.finditer(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M):
                if "security" not in m[1]:
                    return m[1]
    return "http://deb.debian.org/debian"


def build_base(runtime: str, say: Callable[[str], None], force: bool = False) -> str:
    """localhost/perfsuite-test-base:bookworm, by debootstrap minbase and ``podman import``."""
    where = mirror()
    key = hashlib.sha256(f"debootstrap minbase {SUITE} {PACKAGES} {where} trim1".encode()).hexdigest()[:16]
    if not force and label(runtime, BASE) == key:
        say(f"{BASE}: up to date (key {key})")
        return key
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is not on PATH: apt-get install debootstrap")
    old = image_id(runtime, BASE)
    t0 = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="perfsuite-rootfs-", dir="/var/tmp"))
    try:
        run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(rootfs), where], timeout=900)
        t1 = time.monotonic()
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                     "usr/share/locale"):
            for p in (rootfs / junk).glob("*"):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            run([runtime, "import", "--change", f"LABEL {LABEL}={key}", "--change", 'CMD ["/bin/bash"]',
                 "-", BASE], timeout=600, stdin=tar.stdout)
        finally:
            tar.stdout.close()
            tar.wait()
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    drop_replaced(runtime, old, BASE)
    say(f"{BASE}: built in {time.monotonic() - t0:.0f} s (debootstrap {t1 - t0:.0f} s, import "
        f"{time.monotonic() - t1:.0f} s)")
    return key


def wheel(dest: Path, root: Path = ROOT) -> Path:
    """perfsuite's wheel, built from a copy of this tree's package (the tree itself is left as
    it is: no build/ or egg-info written into it by the build)."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, src / name)
    shutil.copytree(root / "perfsuite", src / "perfsuite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info"))
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(src)]
    try:  # with this venv's setuptools and wheel, where it has them: nothing downloaded
        run([*argv[:-1], "--no-build-isolation", argv[-1]], timeout=300)
    except RuntimeError:
        run(argv, timeout=300)  # an isolated build, its setuptools from the index
    found = sorted(dest.glob("perfsuite-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"pip wheel left {len(found)} perfsuite wheels in {dest}")
    return found[0]


def wheel_hash(path: Path) -> str:
    """The wheel's content: its members' names and bytes, not the zip's timestamps."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            h.update(name.encode() + b"\0" + z.read(name) + b"\0")
    return h.hexdigest()


def requirements(path: Path) -> str:
    """The wheel's own dependencies (no extras), without mpich: the last layer installs that."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(z.read(meta).decode())
    keep = []
    for req in message.get_all("Requires-Dist") or []:
        if "extra ==" in req:
            continue
        if re.match(r"mpich\b", req.strip(), re.I):
            continue
        keep.append(req.strip())
    return "\n".join(keep) + "\n"


def pip_cache() -> Path:
    """A pip cache on the host, mounted into the build's RUN steps."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(root) / "perfsuite" / "stack-images-pip"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_mpich(runtime: str, versions: tuple[str, ...], say: Callable[[str], None], force: bool = False,
                root: Path = ROOT) -> dict[str, str]:
    """The MPI images, each keyed by the wheel's content, its recipe and the base's id."""
    base_id = image_id(runtime, BASE)
    built = {}
    with tempfile.TemporaryDirectory(prefix="perfsuite-stack-") as tmp:
        ctx = Path(tmp)
        t0 = time.monotonic()
        whl = wheel(ctx, root)
        digest = wheel_hash(whl)
        (ctx / "requirements.txt").write_text(requirements(whl))
        say(f"perfsuite wheel {whl.name} sha256 {digest[:16]} built in {time.monotonic() - t0:.1f} s")
        shutil.rmtree(ctx / "src")
        for version in versions:
            name = image(version)
            recipe = CONTAINERFILE.format(base=BASE, wheel=whl.name, mpich=version)
            key = hashlib.sha256(f"{digest}\n{base_id}\n{recipe}".encode()).hexdigest()[:16]
            built[version] = name
            if not force and label(runtime, name) == key:
                say(f"{name}: up to date (key {key})")
                continue
            (ctx / "Containerfile").write_text(recipe + f"LABEL {LABEL}={key}\n")
            argv = [runtime, "build", "--pull=never", "--network=host", "--layers", "-t", name,
                    "-f", str(ctx / "Containerfile"), "-v", f"{pip_cache()}:/run/pip-cache"]
            if HOST_CA.exists():
                argv += ["-v", f"{HOST_CA}:/run/host-ca.crt:ro"]
            old = image_id(runtime, name)
            t1 = time.monotonic()
            run([*argv, str(ctx)], timeout=1200)
            drop_replaced(runtime, old, name)
            say(f"{name}: built in {time.monotonic() - t1:.0f} s (key {key})")
    return built


def smoke(runtime: str, name: str) -> str:
    """The image's MPI, as its mpi4py loads it: a built image that cannot run a rank fails here."""
    code = ("import perfsuite, mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version().splitlines()[0].strip())")
    return run([runtime, "run", "--rm", "--network=host", name, "python3", "-c", code], timeout=120).stdout.strip()


@contextlib.contextmanager
def locked() -> Iterator[None]:
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(versions: tuple[str, ...] = MPICH, runtime: str = "podman", force: bool = False,
          say: Callable[[str], None] = print, root: Path = ROOT) -> dict[str, str]:
    """Every image, built where missing or stale: {mpich version: image name}."""
    with locked():
        t0 = time.monotonic()
        try:
            build_base(runtime, say, force)
            built = build_mpich(runtime, versions, say, force, root)
            for version, name in built.items():
                say(f"{name}: {smoke(runtime, name)}")
        except RuntimeError as exc:
            if "OCI" not in str(exc):
                raise
            raise RuntimeError(f"{exc}\n(the OCI runtime refused to start a container: on a machine like CI's, "
                               "every container fails so without .ci/containers.conf as "
                               "/etc/containers/containers.conf; its comments say why)") from None
        say(f"images ready in {time.monotonic() - t0:.0f} s")
        return built


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mpich", default=",".join(MPICH), help="mpich versions, one image each")
    p.add_argument("--runtime", default="podman")
    p.add_argument("--force", action="store_true", help="rebuild even what is up to date")
    args = p.parse_args(argv)
    versions = tuple(v.strip() for v in args.mpich.split(",") if v.strip())
    build(versions, args.runtime, args.force, say=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
