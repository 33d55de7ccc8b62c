"""Alias of cmestream.testing (former package name)."""
from cmestream.testing import *  # noqa: F401,F403
