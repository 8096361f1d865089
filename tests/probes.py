"""What the probe benchmarks' tests share (``python -m commbench.benchmarks.PROBE``)."""

from __future__ import annotations

import pytest


def refusal(main, argv: list[str], capsys) -> str:
    """What a probe's ``main(argv)`` says on stderr refusing its input, after checking
    that it refused with exit status 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err
