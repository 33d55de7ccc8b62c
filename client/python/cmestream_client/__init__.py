"""Former name of the `cmestream` package, kept so existing scripts keep working.
New code: `import cmestream`."""
from cmestream import *  # noqa: F401,F403
from cmestream import __all__  # noqa: F401
