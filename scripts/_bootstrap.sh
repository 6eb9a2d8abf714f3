# Shared, idempotent bootstrap for scripts/dev and scripts/test (source it). Each step is
# skipped when its inputs have not changed since it last ran:
#   bootstrap_python       .venv (from the machine's python3) with `-e .[dev]` installed (the
#                          dev tools and the pydantic-ai extra's packages, which the tests of
#                          threadline.pydantic_ai need; reinstalled when pyproject.toml changes)
#   bootstrap_node         node_modules from package-lock.json (npm ci)
#   bootstrap_wheels       the Pyodide wheels the workerd runtime bundles (pip download)
#   bootstrap_bundle ARGS  the local workerd runtime's bundle (scripts/workerd/build.py)
#   bootstrap_browser      headless Chromium for the browser test (Debian's `chromium`, apt-get)
# Sets ROOT (the project root) and VENV.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

_bootstrap_log() { printf '[bootstrap] %s\n' "$*" >&2; }

_bootstrap_hash() { (cd "$ROOT" && cat "$@" 2>/dev/null) | sha256sum | cut -d' ' -f1; }

bootstrap_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    _bootstrap_log "creating .venv with $(command -v python3) ..."
    python3 -m venv "$VENV"
  fi
  local want have
  want="$(_bootstrap_hash pyproject.toml)"
  have="$(cat "$VENV/.threadline-installed" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    _bootstrap_log "installing threadline and its dev tools into .venv (pip) ..."
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[dev]"
    printf '%s\n' "$want" > "$VENV/.threadline-installed"
  fi
}

bootstrap_node() {
  if ! command -v npm >/dev/null 2>&1; then
    _bootstrap_log "npm not found: Node.js 20+ is needed for the local workerd runtime"
    return 1
  fi
  local want have
  want="$(_bootstrap_hash package.json package-lock.json)"
  have="$(cat "$ROOT/node_modules/.threadline-installed" 2>/dev/null || true)"
  if [ "$want" != "$have" ]; then
    _bootstrap_log "installing miniflare and pyodide (npm ci) ..."
    (cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error >&2)
    printf '%s\n' "$want" > "$ROOT/node_modules/.threadline-installed"
  fi
}

bootstrap_wheels() {
  "$VENV/bin/python" "$ROOT/scripts/workerd/build.py" --wheels-only >/dev/null
}

bootstrap_bundle() {
  "$VENV/bin/python" "$ROOT/scripts/workerd/build.py" "$@" >/dev/null
}

# The browser test opens examples/browser/ in headless Chromium at this path. Installed once
# (apt-get, as root or through passwordless sudo); a failed install stops the test command here
# rather than letting the browser test fail later for a less obvious reason.
BROWSER="/usr/bin/chromium"

bootstrap_browser() {
  if [ -x "$BROWSER" ]; then
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      _bootstrap_log "$BROWSER is missing and this user cannot install packages:"
      _bootstrap_log "  install Debian's chromium package (apt-get install chromium) and rerun"
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    _bootstrap_log "$BROWSER is missing and apt-get is not available: install Chromium at $BROWSER"
    return 1
  fi
  _bootstrap_log "installing Debian's chromium package for the browser test (apt-get update) ..."
  if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update >&2; then
    _bootstrap_log "apt-get update failed: cannot install chromium"
    return 1
  fi
  _bootstrap_log "installing Debian's chromium package (apt-get install chromium) ..."
  if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends chromium >&2; then
    _bootstrap_log "apt-get install chromium failed"
    return 1
  fi
  if [ ! -x "$BROWSER" ]; then
    _bootstrap_log "the chromium package installed, yet $BROWSER is still missing"
    return 1
  fi
  _bootstrap_log "installed $("$BROWSER" --version 2>/dev/null || echo chromium)"
}
