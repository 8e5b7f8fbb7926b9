"""FlashNeRD task definitions. Importing this package registers every task id with gymnasium."""

from flashnerd_tasks import climb, reorient, roll, velocity  # noqa: F401
