#!/bin/bash
# install-system.sh - install the system packages apportion's tests need (Debian, as root).
# Idempotent: installs only the packages that are missing; runs `apt-get update` at most once.
# Add packages to the list below, one per line, grouped by what needs them.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
    # Slurm backend (tests/slurm): controller, node daemon, CLI, munge authentication
    slurmctld
    slurmd
    slurm-client
    munge
    # Slurm accounting for the sacct import test (tests/slurm/test_sacct_import.py)
    slurmdbd
    mariadb-server
    # service store tests (scripts/with-services.sh): PostgreSQL server
    postgresql
    # dashboard browser tests (tests/service/test_dashboard_browser.py): headless Chromium
    chromium
    # the compiled core (python -m apportion.corebuild, tests/core/test_compiled_core.py)
    gcc
    # terminal test of `queue --watch` and `submit --wait` (tests/service/test_e2e_submit.py)
    tmux
)
# ... and the headers of the interpreter it is built for ($PYTHON, default python3): pyenv's
# and python.org's builds ship them, Debian's python3 needs python3-dev
if ! "${PYTHON:-python3}" -c 'import os, sysconfig, sys
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    PACKAGES+=(python3-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-system: all ${#PACKAGES[@]} packages present"
    exit 0
fi
echo "install-system: installing ${missing[*]}"
apt-get update -q >/dev/null
# no init system here: a package's refusal to start its service is expected and harmless
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "install-system: done"
