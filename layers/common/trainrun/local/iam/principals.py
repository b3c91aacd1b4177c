"""Who calls the local account: one principal per role, each with its own random access key.

AWS names the caller of a denied call by its session ARN
(`arn:aws:sts::<account>:assumed-role/<role>/<session>`); the local runtime issues one access key
pair per role when it starts (fresh random keys each start, never the well-known "testing"), and
the endpoint refuses any key it did not issue. Temporary credentials that moto's STS AssumeRole
hands out map to the role they assumed, when the runtime knows that role.

The admin principal deploys the stack and seeds the account fixture (what CloudFormation and the
account's owner do on AWS); it is never given to a function, the head node or the operator.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainrun.local.iam.policy import PolicySet


@dataclass(frozen=True)
class Principal:
    """A role as the local account knows it: its name in reports, the ARN AWS names in a denial,
    and its policies (None: a role with no policy here, denied everything). Only the admin is
    not restricted."""

    name: str
    arn: str
    policies: PolicySet | None
    admin: bool = False
    # Condition keys every call of this principal carries (aws:PrincipalTag/* of a node's role).
    context: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret_access_key: str

    def environment(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}

    def client(self, service: str, region: str, **options: Any) -> Any:
        """A client of the local server (moto's port) signing with this key: what a service the
        runtime plays (a rule, a schedule, Step Functions) calls as the role it acts for."""
        from moto.settings import moto_server_port

        from trainrun.adapters import clients as aws

        return aws.new_client(
            service,
            region_name=region,
            endpoint_url=f"http://localhost:{moto_server_port()}",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            **options,
        )


def session_arn(account: str, role_name: str, session: str) -> str:
    return f"arn:aws:sts::{account}:assumed-role/{role_name}/{session}"


def role_session_user_id(role_arn: str, session: str) -> str:
    """`aws:userid` of a role's session, as AWS fills it: the role's unique id (AROA and 17
    characters, stable for the role here) and the session's name (IAM User Guide, "AWS global
    condition context keys": aws:userid is role-id:caller-specified-role-name for an assumed role)."""
    digest = hashlib.sha256(role_arn.encode()).hexdigest().upper()
    return f"AROA{digest[:17]}:{session}"


class Principals:
    """The access keys this runtime issued, and the roles they belong to."""

    def __init__(self, account: str):
        self.account = account
        self._by_key: dict[str, Principal] = {}
        self._by_role: dict[str, Principal] = {}
        self._lock = threading.Lock()

    def issue(self, principal: Principal, *, role_arn: str | None = None) -> AccessKey:
        """A new key pair for `principal`: AKIA-like id, 40-character secret, as IAM issues them."""
        key = AccessKey(
            access_key_id="AKIA" + secrets.token_hex(8).upper(),
            secret_access_key=secrets.token_urlsafe(30)[:40],
        )
        with self._lock:
            self._by_key[key.access_key_id] = principal
            if role_arn is not None:
                self._by_role[role_arn] = principal
        return key

    def replace(self, name: str, policies: PolicySet) -> None:
        """Give the principal named `name` other policies (the mutation tests remove one statement)."""
        with self._lock:
            for table in (self._by_key, self._by_role):
                for key, principal in table.items():
                    if principal.name == name:
                        table[key] = Principal(
                            principal.name, principal.arn, policies, principal.admin, principal.context
                        )

    def named(self, name: str) -> Principal | None:
        with self._lock:
            return next((p for p in self._by_key.values() if p.name == name), None)

    def all(self) -> list[Principal]:
        with self._lock:
            return list({p.name: p for p in self._by_key.values()}.values())

    def lookup(self, access_key_id: str) -> Principal | None:
        """The principal of an access key: issued here, or a session of moto's STS AssumeRole."""
        with self._lock:
            principal = self._by_key.get(access_key_id)
        if principal is not None:
            return principal
        return self._assumed(access_key_id)

    def _assumed(self, access_key_id: str) -> Principal | None:
        from moto.sts.models import sts_backends

        for assumed in list(sts_backends[self.account]["global"].assumed_roles):
            if assumed.access_key_id != access_key_id:
                continue
            role_name = assumed.role_arn.rsplit("/", 1)[-1]
            with self._lock:
                role = self._by_role.get(assumed.role_arn)
            # A role this runtime does not know has no policies here: every call it makes is denied.
            arn = session_arn(self.account, role_name, assumed.session_name)
            user_id = {"aws:userid": role_session_user_id(assumed.role_arn, assumed.session_name)}
            if role is None:
                return Principal(role_name, arn, None, context=user_id)
            return Principal(role.name, arn, role.policies, role.admin, {**role.context, **user_id})
        return None
