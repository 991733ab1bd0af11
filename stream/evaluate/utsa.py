"""``ratiowatch eval utsa``: the TSSB evaluation on the UTSA folder.

UTSA (the UCR semantic segmentation archive of Gharghabi et al. 2017, as distributed with ClaSS,
Ermshaus et al. 2024) has TSSB's layout: ``desc.txt`` (``name,window_size,cp1,...``),
``datasets/<name>.txt`` and ``streaming_results/<method>.csv``. It is scored exactly as TSSB is
(covering of the true segmentation, by tune / check half; :mod:`ratiowatch.stream.evaluate.tssb`).
This command only changes the default folder (``../shared/bench/utsa``) and the name in messages;
``ratiowatch eval tssb ../shared/bench/utsa`` gives the same result.
"""

from __future__ import annotations

import argparse

from ratiowatch.stream.evaluate import tssb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tssb.add_arguments(parser, "utsa")


def run(args) -> int:
    return tssb.run(args, "utsa")
