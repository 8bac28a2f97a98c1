#!/usr/bin/env bash
# Installs the browser the inspector's tests drive (tests/integration/test_inspector.py) and
# scripts/inspector_screenshots.py uses: Debian's `chromium` package, through apt. Playwright for
# Python (the test extras) drives it by its path; `playwright install` is never run, so nothing is
# downloaded from outside PyPI and apt.
# Idempotent: does nothing when a chromium is already on PATH.
#
# Environment:
#   CHROMIUM   a browser to use instead (its path); checked, never installed
set -euo pipefail

log() { printf '[install-browser] %s\n' "$*" >&2; }

if [[ -n "${CHROMIUM:-}" ]]; then
  "$CHROMIUM" --version >/dev/null
  log "using $CHROMIUM"
  exit 0
fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then
    log "$(command -v "$name") is installed"
    exit 0
  fi
done

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  command -v sudo >/dev/null 2>&1 || { log "chromium is missing and this user cannot run apt-get: install Debian's chromium"; exit 1; }
  SUDO="sudo"
fi
log "installing Debian's chromium (apt-get)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null || {
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null
}
command -v chromium >/dev/null 2>&1 || { log "apt-get installed no chromium"; exit 1; }
log "$(chromium --version 2>/dev/null || echo chromium) installed"
