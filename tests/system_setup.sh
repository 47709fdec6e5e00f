#!/bin/sh
# The Debian packages tests need on a fresh machine, in one apt-get run (one index update):
# chromium and chromium-driver for the live map's browser test (tests/test_service_browser.py;
# Selenium comes with the `browser` extra), redis-server for the Redis Streams tests
# (tests/test_redis.py; the client comes with the `redis` extra, the tests start their own
# server on a loopback port). Does nothing when all are installed. Needs root or sudo.
set -e
missing=""
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    missing="chromium chromium-driver"
fi
if ! command -v redis-server >/dev/null 2>&1; then
    missing="$missing redis-server"
fi
if [ -z "$missing" ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
