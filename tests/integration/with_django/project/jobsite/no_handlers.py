"""The project's settings without JOBFSM['HANDLERS'] (a worker must say what to set)."""

from jobsite.settings import *  # noqa: F403
from jobsite.settings import JOBFSM

JOBFSM = {key: value for key, value in JOBFSM.items() if key != "HANDLERS"}
