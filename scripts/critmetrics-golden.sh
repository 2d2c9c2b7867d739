#!/usr/bin/env bash
# Regenerates the golden files of internal/kshape and internal/kstest from
# the reference implementations (tslearn's KShape, scikit-learn's silhouette,
# SciPy's ks_2samp and kstwo), pinned, in a venv of their own. The Go tests
# read only the committed files: nothing here runs at test time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ROOTLINE_GOLDEN_VENV:-$HOME/.cache/rootline/golden-venv}"
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
[ -x "$venv/bin/pip" ] || "$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check \
  tslearn==0.10.0 scipy==1.17.1 scikit-learn==1.9.1 numpy==2.4.6
"$venv/bin/python" scripts/critmetrics_golden.py \
  internal/kshape/testdata/golden.json internal/kstest/testdata/golden.json
ls -l internal/kshape/testdata/golden.json internal/kstest/testdata/golden.json
