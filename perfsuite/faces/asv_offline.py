"""An asv site that works without internet: the published ``index.html`` loads its scripts
and styles from local copies instead of CDNs (``perfsuite asv-offline``). A face: it reads no
history and writes only the published page's own folder."""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping

from ..records.errors import ConfigError
from ..store.formats import atomic_write


#: asv's index.html loads jQuery, flot, bootstrap, ... from CDNs. On an air-gapped cluster (and
#: in this suite's own browser test) those are copied from Debian packages instead:
#: apt-get install libjs-jquery libghc-js-flot-data libjs-jquery-stupidtable node-blueimp-md5 libjs-bootstrap
#: (flot and blueimp-md5 are the very versions asv names; jQuery 3.6, bootstrap 3.4 and
#: stupidtable 1.1 are API-compatible newer releases of the ones it names).
OFFLINE_JS: dict[str, tuple[str | None, str]] = {
    "jquery-3.3.1.min.js": ("/usr/share/javascript/jquery/jquery.min.js", "libjs-jquery"),
    "jquery.flot.min.js": ("/usr/share/haskell-js-flot/jquery.flot.min.js", "libghc-js-flot-data"),
    "jquery.flot.time.min.js": ("/usr/share/haskell-js-flot/jquery.flot.time.min.js", "libghc-js-flot-data"),
    "jquery.flot.selection.min.js": ("/usr/share/haskell-js-flot/jquery.flot.selection.min.js", "libghc-js-flot-data"),
    "jquery.flot.categories.min.js": ("/usr/share/haskell-js-flot/jquery.flot.categories.min.js", "libghc-js-flot-data"),
    "stupidtable.min.js": ("/usr/share/javascript/jquery-stupidtable/stupidtable.min.js", "libjs-jquery-stupidtable"),
    "md5.min.js": ("/usr/share/javascript/blueimp-md5/md5.min.js", "node-blueimp-md5"),
    "bootstrap.min.js": ("/usr/share/javascript/bootstrap/js/bootstrap.min.js", "libjs-bootstrap"),
    "bootstrap.min.css": ("/usr/share/javascript/bootstrap/css/bootstrap.min.css", "libjs-bootstrap"),
    # No distribution packages flot-orderbars; it only places bars of a bar graph side by side,
    # so the offline site leaves it out (bars overlap) rather than fail to load.
    "jquery.flot.orderBars.js": (None, ""),
}
_CDN_TAG = re.compile(r"""<(script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"[^>]*>(?:\s*</script>)?""")


def make_offline(html_dir: str, table: Mapping[str, tuple[str | None, str]] = OFFLINE_JS) -> list[str]:
    """Rewrite the published ``index.html`` to load its CDN scripts and styles from
    ``vendor/`` copies of local files; returns the CDN names replaced or left out."""
    index = os.path.join(html_dir, "index.html")
    if not os.path.isfile(index):
        raise ConfigError(f"{index} does not exist; run `asv publish` first")
    with open(index, encoding="utf-8") as f:
        html = f.read()
    tags = _CDN_TAG.findall(html)
    unknown = sorted({url for _, url in tags if url.rsplit("/", 1)[-1] not in table})
    if unknown:
        raise ConfigError(f"{index} loads {', '.join(unknown)}, which has no local copy known to "
                          "perfsuite (a newer asv?); add it to perfsuite.faces.asv_offline.OFFLINE_JS")
    missing = sorted({pkg for _, url in tags
                      for src, pkg in [table[url.rsplit("/", 1)[-1]]] if src and not os.path.isfile(src)})
    if missing:
        raise ConfigError("the offline asv site needs local JavaScript: apt-get install -y "
                          + " ".join(missing))
    vendor = os.path.join(html_dir, "vendor")
    os.makedirs(vendor, exist_ok=True)
    done = []

    def local(m: re.Match) -> str:
        kind, url = m.group(1), m.group(2)
        name = url.rsplit("/", 1)[-1]
        src, _ = table[name]
        done.append(name)
        if src is None:
            return f"<!-- {name}: not packaged, left out offline -->"
        copy = os.path.basename(src)  # named as what it is (jquery.min.js is 3.6, not 3.3.1)
        shutil.copyfile(src, os.path.join(vendor, copy))
        if kind == "link":
            return f'<link rel="stylesheet" href="vendor/{copy}">'
        return f'<script src="vendor/{copy}"></script>'

    html = _CDN_TAG.sub(local, html)
    atomic_write(index, html)
    return done
