"""The golden gateway config: what the builder renders for the default
settings, committed in gateway/golden/ so that a change to it shows in
review. ``envoy.yaml`` is the Envoy bootstrap (the same data `tokenwire
gateway` writes as JSON), ``lua/`` the Lua modules generated at config time.
tests/pure/test_gateway_golden.py fails when the builder's output and these
files differ; after a deliberate change refresh them with

    python -m tokenwire.gateway.golden

(PyYAML, a dev dependency, writes the YAML.)
"""

from __future__ import annotations

import pathlib
import sys

from tokenwire.gateway import config, lua_bundle
from tokenwire.gateway.settings import PACKAGE_DIR, GatewaySettings

GOLDEN_DIR = PACKAGE_DIR / "golden"
CONFIG_DIR = "<config_dir>"  # stands for where the gateway writes its config
PACKAGE = "<tokenwire.gateway>"  # stands for the installed package (gateway/ here)
COMMAND = "python -m tokenwire.gateway.golden"

HEADER = f"""\
# The Envoy bootstrap of `tokenwire gateway` with the default settings
# (tokenwire.gateway.config; at run time it writes the same data as JSON).
# Generated: do not edit. Refresh with `{COMMAND}`;
# tests/pure/test_gateway_golden.py fails while this file is stale.
#
# {CONFIG_DIR}: where the gateway writes its config (--config-dir; default a
#   temporary folder). {CONFIG_DIR}/lua/<filter>.lua is gateway/lua/<filter>.lua
#   with the modules it requires bundled in front (tokenwire.gateway.lua_bundle),
#   among them the generated ones in gateway/golden/lua/ (wire.lua: the names
#   of tokenwire/wire.py).
# {PACKAGE}: the installed tokenwire.gateway package (gateway/ in the repository).
"""


def files() -> dict[str, str]:
    """The golden files (path under GOLDEN_DIR -> text) as the builder renders them now."""
    import yaml

    settings = GatewaySettings()
    doc = config.build(settings, pathlib.PurePosixPath(CONFIG_DIR) / "lua")
    text = yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)
    out = {"envoy.yaml": HEADER + text.replace(str(PACKAGE_DIR), PACKAGE)}
    for name, source in lua_bundle.generated_modules(settings).items():
        out[f"lua/{name}.lua"] = source
    return out


def stale() -> list[str]:
    """The golden files that differ from (or are missing beside) the builder's output."""
    current = files()
    on_disk = {str(p.relative_to(GOLDEN_DIR)) for p in GOLDEN_DIR.rglob("*") if p.is_file()}
    changed = [name for name, text in current.items()
               if not (GOLDEN_DIR / name).is_file() or (GOLDEN_DIR / name).read_text() != text]
    return sorted(changed + sorted(on_disk - set(current)))


def write() -> list[pathlib.Path]:
    """Write the golden files afresh (and drop any the builder no longer makes)."""
    current = files()
    for path in GOLDEN_DIR.rglob("*"):
        if path.is_file() and str(path.relative_to(GOLDEN_DIR)) not in current:
            path.unlink()
    paths = []
    for name, text in current.items():
        path = GOLDEN_DIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


def main() -> int:
    for path in write():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
