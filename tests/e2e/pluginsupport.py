"""Where the built dask_caps module is, and how a Dask process loads the
plugin (test support for test_plugin*.py).

The module: DASK_CAPS_PYTHONPATH names a folder holding the dask_caps
package; otherwise the build tree's python/ (DASKCAPS_BUILD_DIR, which ctest
sets, or build/ beside the sources). Where it is missing (no pybind11, or a
sanitizer build, which does not build it) the plugin tests skip with the
reason.

A process loads the plugin as a user's would:
  scheduler, worker  --preload dask_caps.plugin on the command line
                     (Dask's own option), or a Dask config file
  nanny              --preload-nanny dask_caps.plugin
  client             distributed.client.preload, from the environment
                     (DASK_DISTRIBUTED__CLIENT__PRELOAD) or a config file
The plugin's debug line per connection goes to the process's log with
DEBUG_LOGGING in its environment.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
FAKE_CUPY = os.path.join(HERE, "fakecupy")
CLIENT = os.path.join(HERE, "bridge_client.py")

PRELOAD = ["--preload", "dask_caps.plugin"]
PRELOAD_NANNY = ["--preload-nanny", "dask_caps.plugin"]
# Dask's logging config as one value: the plugin's logger at debug, the
# rest of distributed as the cluster helper has it.
DEBUG_LOGGING = {"DASK_DISTRIBUTED__LOGGING": repr({"distributed": "info", "distributed.dask_caps": "debug"})}


def module_dir() -> str:
    return os.environ.get("DASK_CAPS_PYTHONPATH") or os.path.join(BUILD_DIR, "python")


def missing() -> str | None:
    """Why the plugin tests cannot run here, or None."""
    d = module_dir()
    if not glob.glob(os.path.join(d, "dask_caps", "_core*.so")):
        return (f"the dask_caps module is not built at {d} (needs pybind11-dev and python3-dev; "
                f"sanitizer builds leave it out; DASK_CAPS_PYTHONPATH names another folder)")
    if not os.path.exists(os.path.join(d, "dask_caps", "plugin.py")):
        return f"{d}/dask_caps has no plugin.py"
    return None


def pythonpath(*extra: str) -> str:
    return os.pathsep.join([*extra, module_dir()])


def env(plugin_importable: bool = True, fake_cupy: bool = False, **more) -> dict:
    """Environment for a Dask process: the module importable (it loads only
    when preloaded), fakecupy for a worker that returns CuPy results,
    plugin debug logging, and `more` (values None remove a variable)."""
    out = dict(DEBUG_LOGGING)
    parts = [FAKE_CUPY] if fake_cupy else []
    if plugin_importable:
        out["PYTHONPATH"] = pythonpath(*parts)
    elif parts:
        out["PYTHONPATH"] = os.pathsep.join(parts)
    out.update(more)
    return out


def client_env(plugin: bool, **more) -> dict:
    """A client's environment: its compression "auto" (as a user's default
    of 2022.12 would resolve it), and the plugin through
    distributed.client.preload when `plugin`."""
    e = dict(os.environ)
    e.update(DEBUG_LOGGING)
    e["DASK_DISTRIBUTED__COMM__COMPRESSION"] = "auto"
    e["PYTHONPATH"] = pythonpath()
    if plugin:
        e["DASK_DISTRIBUTED__CLIENT__PRELOAD"] = '["dask_caps.plugin"]'
    else:
        e.pop("DASK_DISTRIBUTED__CLIENT__PRELOAD", None)
    for k, v in more.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def run_client(dask, mode: str, address: str, n: int, plugin: bool, timeout: float = 180, **more) -> dict:
    """bridge_client.py MODE ADDRESS N under that Dask: its JSON result, with
    its stderr under "log"."""
    p = subprocess.run([dask.python, CLIENT, mode, address, str(n)], capture_output=True, text=True,
                       timeout=timeout, env=client_env(plugin, **more), cwd=HERE)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"client {mode} printed no result (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
    out = json.loads(lines[-1])
    out["log"] = p.stderr
    return out


def run_script(dask, code: str, timeout: float = 240, **more) -> dict:
    """`code` in a fresh interpreter of that Dask (a client's environment
    without the plugin preloaded, this folder as the working directory):
    the last JSON line it prints, with its stderr under "log"."""
    p = subprocess.run([dask.python, "-c", code], capture_output=True, text=True, timeout=timeout,
                       env=client_env(False, **more), cwd=HERE)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise AssertionError(f"script failed (rc {p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}")
    out = json.loads(lines[-1])
    out["log"] = p.stderr
    return out


def plugin_lines(log: str) -> list[str]:
    """The plugin's lines in a process log."""
    return [line for line in log.splitlines() if "dask-caps" in line]


def main() -> None:
    """daskversions.main(), or exit 77 (ctest's "skipped") with one line
    where the module is missing: every case needs it."""
    import sys

    import daskversions

    why = missing()
    if why:
        print(f"NOTICE: {why}: the plugin tests are skipped", file=sys.stderr, flush=True)
        sys.exit(77)
    daskversions.main()
