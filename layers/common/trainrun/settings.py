"""Environment variables, validated once at the edge (the handler), never read by domain code."""

from __future__ import annotations

import os
from typing import Self

from pydantic import BaseModel, ConfigDict, Field


class _Environment(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    @classmethod
    def from_environ(cls) -> Self:
        return cls.model_validate(dict(os.environ))


class StepSettings(_Environment):
    """What every workflow step needs."""

    runs_table: str = Field(alias="RUNS_TABLE", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)


class StartRunSettings(_Environment):
    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN", pattern=r"^arn:aws[a-z-]*:states:")
    config_bucket: str = Field(alias="CONFIG_BUCKET", min_length=3)
