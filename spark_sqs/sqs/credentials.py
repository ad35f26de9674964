"""Where the AWS credentials of every client the package makes come from: SQS, the Extended
Client's S3 payloads and an ``s3://`` journal. Runs on: driver and executors (each process
builds its own sessions; only option values travel in pickles).

In order of precedence for the base credentials:

1. ``serviceCredential``: a Unity Catalog service credential, by name, from the provider that
   Databricks documents (``databricks.service_credentials.getServiceCredentialsProvider`` in
   UDFs, ``dbutils.credentials.getServiceCredentialsProvider`` in notebooks). Each returns a
   botocore session; its credentials are what Databricks refreshes. Databricks documents neither
   inside a Python data source's processes, so where neither is found the error names the
   runtime and the alternatives.
2. ``awsAccessKeyId``/``awsSecretAccessKey`` (+ ``awsSessionToken``).
3. ``profile``, else botocore's default chain (environment, instance profile, ...).

With ``roleArn`` the base credentials then assume that role through botocore's own
``AssumeRoleCredentialFetcher`` and ``RefreshableCredentials``, which fetch new keys before the
old ones expire.

Every session this module returns is a botocore session of its own, whose credential resolver
hands out those credentials: callers may register components on it (the journal registers a
response parser) without touching a session that belongs to someone else, such as the one the
service-credential provider returns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import botocore.session
from botocore.credentials import (
    AssumeRoleCredentialFetcher,
    CredentialProvider,
    CredentialResolver,
    Credentials,
    RefreshableCredentials,
)

from ..errors import SqsAccessError

#: The module Databricks documents for service credentials in UDFs.
UDF_MODULE = "databricks.service_credentials"
#: The function both documented entry points offer.
PROVIDER_FUNCTION = "getServiceCredentialsProvider"

ALTERNATIVES = (
    "the cluster's instance profile (leave the credential options unset), a role the cluster "
    "may assume ('roleArn'), or keys from a secret scope ('awsAccessKeyId'/"
    "'awsSecretAccessKey' with dbutils.secrets.get)"
)


class _Given(CredentialProvider):
    """A credential provider that hands out credentials obtained elsewhere."""

    METHOD = "spark-sqs"
    CANONICAL_NAME = "spark-sqs"

    def __init__(self, credentials: Credentials | None) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials | None:
        return self._credentials


def session_with(credentials: Credentials | None, region: str | None) -> botocore.session.Session:
    """A new botocore session whose only credentials are ``credentials``."""
    session = botocore.session.Session()
    session.register_component("credential_provider", CredentialResolver([_Given(credentials)]))
    if region:
        session.set_config_variable("region", region)
    return session


def runtime_description(env: Any = None) -> str:
    """What runs this process, for errors: the Databricks Runtime if any, else Python/PySpark."""
    env = os.environ if env is None else env
    version = env.get("DATABRICKS_RUNTIME_VERSION")
    if version:
        return f"Databricks Runtime {version}"
    try:
        import pyspark

        spark = f"PySpark {pyspark.__version__}"
    except ImportError:
        spark = "no PySpark"
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"not a Databricks runtime (Python {python}, {spark})"


def find_provider_function() -> tuple[Callable[[str], Any], str] | None:
    """The documented ``getServiceCredentialsProvider`` available in this process, and where it
    was found; None where the runtime offers neither."""
    try:
        module = __import__(UDF_MODULE, fromlist=[PROVIDER_FUNCTION])
    except ImportError:
        module = None
    function = getattr(module, PROVIDER_FUNCTION, None)
    if callable(function):
        return function, f"{UDF_MODULE}.{PROVIDER_FUNCTION}"
    # A notebook's REPL puts dbutils in the __main__ namespace.
    dbutils = getattr(sys.modules.get("__main__"), "dbutils", None)
    function = getattr(getattr(dbutils, "credentials", None), PROVIDER_FUNCTION, None)
    if callable(function):
        return function, f"dbutils.credentials.{PROVIDER_FUNCTION}"
    return None


def service_credentials(name: str) -> Credentials:
    """The credentials of the Unity Catalog service credential ``name``, from the documented
    provider; ``SqsAccessError`` naming the runtime and the alternatives where there is none."""
    found = find_provider_function()
    if found is None:
        raise SqsAccessError(
            f"serviceCredential {name!r}: this process ({runtime_description()}, "
            f"{sys.executable}) offers neither {UDF_MODULE}.{PROVIDER_FUNCTION} nor "
            f"dbutils.credentials.{PROVIDER_FUNCTION}. Databricks documents service "
            "credentials from Databricks Runtime 16.2 (preview from 15.4 LTS) in notebooks and "
            "UDFs, not inside a Python data source's processes. Fix: use "
            f"{ALTERNATIVES} instead of 'serviceCredential'"
        )
    function, where = found
    try:
        provider = function(name)
        credentials = provider.get_credentials()
    except Exception as exc:
        raise SqsAccessError(
            f"serviceCredential {name!r}: {where}({name!r}) failed: "
            f"{type(exc).__name__}: {exc}. Fix: check the credential's name (SHOW SERVICE "
            "CREDENTIALS) and that you have the ACCESS privilege on it, or use "
            f"{ALTERNATIVES}"
        ) from None
    if credentials is None:
        raise SqsAccessError(
            f"serviceCredential {name!r}: {where} returned a session without credentials. "
            f"Fix: check the service credential in Unity Catalog, or use {ALTERNATIVES}"
        )
    return credentials


def assumed_role_credentials(
    base: botocore.session.Session,
    role_arn: str,
    session_name: str,
    external_id: str | None,
    on_error: Callable[[Exception], Exception],
) -> RefreshableCredentials:
    """``role_arn`` assumed with ``base``'s credentials; botocore refreshes the result before
    it expires. The first AssumeRole call is made now, so a role that cannot be assumed fails
    here (``on_error`` turns the botocore error into ours)."""
    extra: dict[str, Any] = {"RoleSessionName": session_name}
    if external_id:
        extra["ExternalId"] = external_id
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=base.create_client,
        source_credentials=base.get_credentials(),
        role_arn=role_arn,
        extra_args=extra,
    )
    try:
        first = fetcher.fetch_credentials()
    except Exception as exc:
        raise on_error(exc) from None
    return RefreshableCredentials.create_from_metadata(
        metadata=first, refresh_using=fetcher.fetch_credentials, method="assume-role"
    )
