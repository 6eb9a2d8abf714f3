"""Build this repository's bundle for the local workerd runtime (see threadline.devserver.bundle).

Usage: python scripts/workerd/build.py [--out DIR] [--overlay DIR] [--main MODULE]
                                       [--durable-object BINDING=Class] [--force]
       python scripts/workerd/build.py --wheels-only
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from threadline.devserver.bundle import main  # noqa: E402 - after the path is set

if __name__ == "__main__":
    sys.exit(main(default_root=ROOT))
