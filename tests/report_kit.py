"""What the HTML report tests share: the data a report page embeds for its charts.

Importable from every test directory: ``tests/`` is on ``sys.path`` as the directory of the root conftest.
"""

from __future__ import annotations

import json
import re
from typing import Any


def report_data(page: str) -> dict[str, Any]:
    """The JSON a report page carries in its ``report-data`` script (the charts' data and the document)."""
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data
