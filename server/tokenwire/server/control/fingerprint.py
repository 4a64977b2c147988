"""A checkpoint folder's fingerprint: what its weight files are now, cheap
enough to take at every load (one stat per file, no reading).

It hashes, for every regular file directly in the folder that the engine's
weight loader reads (the `files` glob, e.g. "*.safetensors"; every file when
none is given), its name, size, mtime_ns, ctime_ns and inode. Writing a file
in place changes its mtime and ctime, replacing it (write then rename)
changes its inode, and neither `touch -d` nor `cp -p` can set a ctime back:
a folder overwritten with other weights has another fingerprint, whatever
the writer did with the timestamps. A rollback that names the fingerprint
the server recorded when it loaded the folder is refused when the folder no
longer holds those files (docs/control.md, "Rollback and fingerprints").

"" means unknown: not a folder (a model id the engine resolved itself), or
a folder that changed while it was loading.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat

from tokenwire.server.core.engine_control import is_folder

PREFIX = "files-v1:"  # the form of the fingerprint: another form, another prefix


def fingerprint(folder: str, files: str = "") -> str:
    """The fingerprint of `folder`'s weight files now ("" when it is not a
    folder; a folder with none has the fingerprint of none)."""
    if not is_folder(folder):
        return ""
    digest = hashlib.sha256()
    count = 0
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), files or "*"))):
        try:
            st = os.stat(path)  # a symlinked file: its target's
        except OSError:  # removed meanwhile: it is not part of the folder now
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        name = os.path.basename(path)
        digest.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0"
                      f"{st.st_ino}\n".encode("utf-8", "surrogateescape"))
        count += 1
    return f"{PREFIX}{count}:{digest.hexdigest()[:32]}"
