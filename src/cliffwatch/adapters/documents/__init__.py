"""Documents from outside, read by one bounded loader into JSON's values, or refused with a clear reason.

Every entry point reads through it: scenario files and the dashboard's paste box (``load_yaml``; JSON is YAML
too), the API's bodies (``load_json``), the settings file and the built-in target's parameters
(``load_yaml``), result files read for reports (``load_json``). Each passes its ``DocumentLimits``: bytes,
nesting depth, values counted as a tree (every alias expanded) and aliases, checked while the document is
read, so what a document costs to parse, validate, hash, store and show is bounded by its limits, not by
what it claims. The service parses in a thread of its own (``load_off_loop``).
"""

from cliffwatch.adapters.documents.json_loader import load_json
from cliffwatch.adapters.documents.limits import (
    CONFIG_LIMITS,
    MAX_NUMBER_CHARS,
    RESULT_LIMITS,
    SCENARIO_LIMITS,
    DocumentInvalid,
    DocumentLimits,
    DocumentLoader,
)
from cliffwatch.adapters.documents.offload import dump_yaml, load_off_loop, off_loop
from cliffwatch.adapters.documents.yaml_loader import load_yaml

__all__ = [
    "CONFIG_LIMITS",
    "MAX_NUMBER_CHARS",
    "RESULT_LIMITS",
    "SCENARIO_LIMITS",
    "DocumentInvalid",
    "DocumentLimits",
    "DocumentLoader",
    "dump_yaml",
    "load_json",
    "load_off_loop",
    "load_yaml",
    "off_loop",
]
