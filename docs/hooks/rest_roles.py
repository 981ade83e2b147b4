"""mkdocs hook: drop the reST role prefix our docstrings use before inline code.

The docstrings are written for both ``help()`` and this site and say
``:class:`Reader``` or ``:meth:`close```. Markdown renders the backticks as code and
leaves the role name in front of it (":class:Reader"); this removes the role name.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub("", html)
