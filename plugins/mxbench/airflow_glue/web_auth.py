"""Who is asking the mxbench pages, and what Airflow's auth manager lets them do: the request's
user (a bearer token or the UI's login cookie, as the api-server's own routes find it) and whether
they may read or change a DAG's runs."""
from __future__ import annotations

from typing import Annotated, Optional

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

# Airflow's api-server modules are imported inside the functions: every Airflow process that
# loads plugins (each task's, too) imports the web app, and only the api-server needs them.


async def current_user(request: Request, credentials: Annotated[Optional[HTTPAuthorizationCredentials],
                                                                 Depends(HTTPBearer(auto_error=False))]):
    """The request's Airflow user, found as the api-server's own routes find it: a bearer token,
    else the UI's login cookie. None valid: 401."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, credentials)


async def writer(request: Request, credentials: Annotated[Optional[HTTPAuthorizationCredentials],
                                                           Depends(HTTPBearer(auto_error=False))]):
    """The user of a write, and whether a bearer token (not the login cookie) named them."""
    return await current_user(request, credentials), credentials is not None


def may_read(user, dag_id: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` read the DAG runs of ``dag_id``."""
    return authorized(user, dag_id, "GET")


def may_edit(user, dag_id: str) -> bool:
    """Whether the auth manager lets ``user`` change the DAG runs of ``dag_id``: who may triage their alerts."""
    return authorized(user, dag_id, "PUT")


def authorized(user, dag_id: str, method: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    return get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN, user=user,
        details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)))
