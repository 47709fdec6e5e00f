#!/bin/sh
# What the service's browser test (tests/test_service_browser.py) needs on a fresh machine:
# Debian's chromium and chromium-driver (Selenium comes with the `browser` extra).
# Safe to run again: does nothing when both are installed. Needs root or sudo.
set -e
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver
