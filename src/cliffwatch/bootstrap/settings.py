"""Settings as a process starts: its environment, and the settings file ``CLIFFWATCH_CONFIG`` names, read here
with the bounded document loader (``adapters.documents``) so that ``config`` itself reads no file."""

from __future__ import annotations

from collections.abc import Mapping

from cliffwatch.adapters.documents import CONFIG_LIMITS, DocumentInvalid, load_yaml
from cliffwatch.config import ConfigFile, Settings, expand_home, process_environment


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of ``environ`` (this process's by default) and of the file it names; raises ``SettingsInvalid``
    naming every bad value, of either, with its source."""
    env = process_environment() if environ is None else environ
    return Settings.from_env(env, config_file=read_config_file(env))


def read_config_file(env: Mapping[str, str]) -> ConfigFile | None:
    """The file ``CLIFFWATCH_CONFIG`` names (``~`` expanded with the environment's HOME), parsed within the settings
    file's limits; None when it names none. A file that cannot be read or parsed says why (``ConfigFile.problem``)."""
    path_text = env.get("CLIFFWATCH_CONFIG")
    if not path_text:
        return None
    try:
        with expand_home(path_text, env).open("rb") as handle:
            raw = handle.read(CONFIG_LIMITS.max_bytes + 1)  # a byte over is enough to refuse; /dev/zero ends
        document = load_yaml(raw, CONFIG_LIMITS)
    except OSError as exc:
        return ConfigFile(path=path_text, problem=f"cannot read {path_text}: {exc.strerror}")
    except DocumentInvalid as exc:
        return ConfigFile(path=path_text, problem=f"{path_text}: {exc}")
    return ConfigFile(path=path_text, document=document)
