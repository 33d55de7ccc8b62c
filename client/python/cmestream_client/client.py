"""Alias of cmestream.client (former package name)."""
from cmestream.client import *  # noqa: F401,F403
