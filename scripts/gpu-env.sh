# Sourced by the scripts/gpu-*.sh commands, from the repository root: pv runs from the source
# tree (PYTHONPATH), and pydantic/jsonschema, which the GPU machine lacks, are installed from
# wheels in .whl/ into a private directory (or from the package index where one is reachable).
# Defines $py and pv().
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}

if ! "$py" -c 'import pydantic, jsonschema' 2>/dev/null; then
  if compgen -G '.whl/*.whl' >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pv-site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/pv-site:$PYTHONPATH"
  else
    "$py" -m pip install -q pydantic jsonschema || exit 2
  fi
fi

pv() { "$py" -m pv.cli "$@"; }
