"""Alias of cmestream.basins (former package name)."""
from cmestream.basins import *  # noqa: F401,F403
