"""Settings: the frozen ``Settings`` value (``settings``) and the table that declares every one of them (``specs``)."""

from cliffwatch.config.settings import ConfigFile, Settings, process_environment
from cliffwatch.config.specs import SPECS, SettingsInvalid, Spec, describe_settings, expand_home

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
