"""Write the golden analysis outputs that ``test_golden.py`` compares against.

Run once before a refactor that must not change results::

    python tests/golden/make_golden.py

Every frame of every analysis on the committed real runs and on seeded synthetic
sweeps is written as parquet; the test recomputes them and asserts bit-for-bit equality.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from cases import golden_cases  # noqa: E402


def main() -> None:
    out = HERE / "frames"
    out.mkdir(exist_ok=True)
    for name, frame in golden_cases():
        frame.write_parquet(out / f"{name}.parquet")
        print(name, frame.shape)


if __name__ == "__main__":
    main()
