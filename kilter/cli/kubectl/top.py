"""stub"""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    sub.add_parser("top", parents=[common])
