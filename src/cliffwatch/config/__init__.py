"""Settings: the frozen ``Settings`` value (``settings``), the table that declares every one of them (``specs``)
and the parsers that read their values (``parsers``)."""

from cliffwatch.config.parsers import expand_home
from cliffwatch.config.settings import ConfigFile, Settings, process_environment
from cliffwatch.config.specs import SPECS, SettingsInvalid, Spec, describe_settings

__all__ = [
    "SPECS",
    "ConfigFile",
    "Settings",
    "SettingsInvalid",
    "Spec",
    "describe_settings",
    "expand_home",
    "process_environment",
]
