#!/bin/sh
# What the Redis tests (tests/test_redis.py) need on a fresh machine: Debian's redis-server
# (the redis client library comes with the `redis` extra). The tests start their own server
# on a free loopback port and stop it by pid. Safe to run again: does nothing when it is
# installed. Needs root or sudo.
set -e
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server
