"""OpenPAI v1.8's /api/v2 answers and bodies for everything but jobs: authn, info, users, groups, tokens,
storages and SKU types, as models (the OpenAPI document's schemas are generated from :data:`V2_ANSWERS` and
:data:`V2_REQUESTS`). Shapes are those of microsoft/pai v1.8.0 ``src/rest-server/src/controllers/v2/*`` and
``models/v2/*``; keys as OpenPAI wrote them (camelCase, ``grouplist``, ``groupname``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel, ValidationInfo

from services.submit.contract.answers import Answer
from services.submit.contract.refusals import refusal
from services.submit.contract.requests import Request, UserName, _password
from services.submit.users import MAX_PASSWORD_BYTES, MIN_PASSWORD_LENGTH
from shared.db.groups import GROUP_PATTERN

# -- answers ---------------------------------------------------------------------------------------------------


class Info(Answer):
    """``GET /api/v2/info``."""

    name: str
    version: str
    launcher_type: str
    authn_method: str


class Login(Answer):
    """``POST /api/v2/authn/basic/login`` (OpenPAI v1.8's token controller ``get``)."""

    user: str
    token: str
    admin: bool
    has_git_hub_pat: bool = Field(alias="hasGitHubPAT", description="paiq keeps no GitHub token: always false")


class V2User(Answer):
    """A user as OpenPAI v1.8 answered ``GET /api/v2/users/:username`` (password removed)."""

    model_config = ConfigDict(alias_generator=None)
    username: str
    grouplist: tuple[str, ...]
    email: str
    extension: dict[str, Any]
    admin: bool
    virtual_cluster: tuple[str, ...] = Field(alias="virtualCluster")
    storage_config: tuple[str, ...] = Field(alias="storageConfig")


class V2UserList(RootModel[tuple[V2User, ...]]):
    """Users, by name."""


class GroupAcls(Answer):
    admin: bool
    virtual_clusters: tuple[str, ...]
    storage_configs: tuple[str, ...]


class GroupExtension(BaseModel):
    """A group's extension: what was stored, with ``acls`` as paiq derives them."""

    model_config = ConfigDict(frozen=True, extra="allow")
    acls: GroupAcls


class V2Group(Answer):
    """A group as OpenPAI v1.8 answered ``GET /api/v2/groups/:groupname``."""

    groupname: str
    description: str
    external_name: str
    extension: GroupExtension


class V2GroupList(RootModel[tuple[V2Group, ...]]):
    """Groups, by name."""


class GroupMember(Answer):
    username: str
    cluster_admin: bool


class GroupMembers(RootModel[tuple[GroupMember, ...]]):
    """``GET /api/v2/groups/:groupname/userlist``: the group's users, by name."""


class Tokens(Answer):
    """``GET /api/v2/tokens``: the caller's live tokens. OpenPAI listed its JWTs; paiq keeps only digests,
    so each is the id ``DELETE /api/v2/tokens/{token}`` takes beside the token itself."""

    tokens: tuple[str, ...]


class TokenCheck(Answer):
    """``GET /api/v2/tokens/check``: whose token it is (OpenPAI v1.8 answered the JWT's claims with ``admin``)."""

    username: str
    admin: bool
    application: bool


class ApplicationToken(Answer):
    token: str
    application: Literal[True]


class StorageSummary(Answer):
    name: str
    share: bool
    volume_name: str


class Storages(Answer):
    """``GET /api/v2/storages``: the storages the caller may use."""

    storages: tuple[StorageSummary, ...]


class Storage(StorageSummary):
    """``GET /api/v2/storages/:name``."""

    type: str
    data: dict[str, Any]
    read_only: bool
    mount_options: tuple[str, ...]


class SkuType(Answer):
    """One SKU: what one unit of it gives (OpenPAI's ``resourceUnits``: ``gpu``, ``cpu``, ``memory`` MB)."""

    gpu: int
    cpu: int
    memory: int


class SkuTypes(RootModel[dict[str, SkuType]]):
    """SKU types by name."""


class V2Resources(Answer):
    """OpenPAI v1.8's VC resources (``vCores`` and ``GPUs`` repeat ``cpu`` and ``gpu``, as OpenPAI did)."""

    cpu: int
    memory: int
    gpu: int
    v_cores: int = Field(alias="vCores")
    gp_us: int = Field(alias="GPUs")


class V2VirtualCluster(Answer):
    """A virtual cluster as OpenPAI v1.8 answered ``GET /api/v2/virtual-clusters/:name``."""

    capacity: float
    used_capacity: float
    max_capacity: float
    dedicated: bool
    resources_used: V2Resources
    resources_guaranteed: V2Resources
    resources_total: V2Resources
    status: Literal["RUNNING", "STOPPED", "DRAINING"] = Field(description=(
        "OpenPAI's YARN queue state: RUNNING; STOPPED (PUT .../status: no new jobs); DRAINING: stopped, its "
        "queued and running jobs not all ended yet"))


class V2VirtualClusters(RootModel[dict[str, V2VirtualCluster]]):
    """Virtual clusters by name."""


class VcDone(Answer):
    """A VC saved or removed (OpenPAI v1.8's ``{status, message}``)."""

    status: int
    message: str


V2Body = Answer | V2VirtualClusters | V2UserList | V2GroupList | GroupMembers | SkuTypes


def v2_answer(body: V2Body, *, status: int = 200) -> web.Response:
    return web.json_response(body.model_dump(mode="json", by_alias=True), status=status)


# -- bodies ----------------------------------------------------------------------------------------------------


def _group_name(value: object, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not GROUP_PATTERN.fullmatch(value):
        raise refusal(f"{info.field_name}: must be 1-64 letters, digits or '_'")
    return value


GroupName = Annotated[str, Field(pattern=f"^{GROUP_PATTERN.pattern}$"), BeforeValidator(_group_name)]
Extension = dict[str, Any]
Password = Annotated[str, _password(at_least=MIN_PASSWORD_LENGTH)]
_PASSWORD = Field(min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_BYTES)
Email = Annotated[str, Field(max_length=254)]


class V2Request(Request):
    model_config = ConfigDict(frozen=True, extra="forbid", regex_engine="python-re")


class UserCreate(V2Request):
    """``POST /api/v2/users``."""

    username: UserName
    email: Email = ""
    virtual_cluster: list[str] = Field(default=[], alias="virtualCluster", max_length=1000)
    admin: bool = False
    password: Password = _PASSWORD
    extension: Extension = Field(default_factory=dict)


class UserData(V2Request):
    username: UserName
    email: Email | None = None
    virtual_cluster: list[str] | None = Field(default=None, alias="virtualCluster", max_length=1000)
    admin: bool | None = None
    password: Password | None = Field(default=None, min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_BYTES)
    extension: Extension | None = None


class UserUpdate(V2Request):
    """``PUT /api/v2/users``: an admin changes a user (``patch``: only what ``data`` gives)."""

    patch: bool = False
    data: UserData


class MeData(V2Request):
    username: UserName
    email: Email | None = None
    new_password: Password | None = Field(default=None, alias="newPassword", min_length=MIN_PASSWORD_LENGTH,
                                          max_length=MAX_PASSWORD_BYTES)
    old_password: str | None = Field(default=None, alias="oldPassword", max_length=MAX_PASSWORD_BYTES)
    extension: Extension | None = None


class MeUpdate(V2Request):
    """``PUT /api/v2/users/me``: a user changes their own e-mail, password (``oldPassword`` too) or extension."""

    patch: bool = False
    data: MeData


class PasswordChange(V2Request):
    """``PUT /api/v2/users/:username/password``: ``oldPassword`` needed unless an admin asks."""

    old_password: str | None = Field(default=None, alias="oldPassword", max_length=MAX_PASSWORD_BYTES)
    new_password: Password = Field(alias="newPassword", min_length=MIN_PASSWORD_LENGTH,
                                   max_length=MAX_PASSWORD_BYTES)


class EmailChange(V2Request):
    email: Email = ""


class AdminChange(V2Request):
    admin: bool


class UserVirtualClusters(V2Request):
    """``PUT /api/v2/users/:username/virtualcluster``: the VCs that name the user (not a VC's own body, which is
    the document's ``VirtualClusterChange``)."""

    virtual_cluster: list[str] = Field(alias="virtualCluster", max_length=1000)


class ExtensionChange(V2Request):
    extension: Extension


class GroupRef(V2Request):
    """``PUT``/``DELETE /api/v2/users/:username/group``."""

    groupname: GroupName


class Grouplist(V2Request):
    """``PUT /api/v2/users/:username/grouplist``."""

    grouplist: list[GroupName] = Field(max_length=1000)


class GroupCreate(V2Request):
    """``POST /api/v2/groups``."""

    groupname: GroupName
    description: str = Field(default="", max_length=10_000)
    external_name: str = Field(default="", alias="externalName", max_length=1000)
    extension: Extension = Field(default_factory=dict)


class GroupData(V2Request):
    groupname: GroupName
    description: str | None = Field(default=None, max_length=10_000)
    external_name: str | None = Field(default=None, alias="externalName", max_length=1000)
    extension: Extension | None = None


class GroupUpdate(V2Request):
    """``PUT /api/v2/groups``: an admin changes a group (``patch``: only what ``data`` gives)."""

    patch: bool = False
    data: GroupData


class GroupExtensionChange(V2Request):
    """``PUT /api/v2/groups/:groupname/extension``: its keys merged into the group's extension."""

    extension: Extension


class GroupDescriptionChange(V2Request):
    """``PUT /api/v2/groups/:groupname/description``."""

    description: str = Field(default="", max_length=10_000)


class GroupExternalNameChange(V2Request):
    """``PUT /api/v2/groups/:groupname/externalname``."""

    external_name: str = Field(default="", alias="externalName", max_length=1000)


class GroupExtensionValue(V2Request):
    """``PUT /api/v2/groups/:groupname/extension/<key>/<key>...``: the value set at that path of the extension
    (any JSON, null included)."""

    data: Any


class VcStatusChange(V2Request):
    """``PUT /api/v2/virtual-clusters/:vc/status``."""

    vc_status: Literal["running", "stopped"] = Field(alias="vcStatus")


V2_ANSWERS: tuple[type[BaseModel], ...] = (Info, Login, V2User, V2UserList, V2Group, V2GroupList, GroupMembers,
                                           Tokens, TokenCheck, ApplicationToken, Storages, Storage, SkuTypes,
                                           V2VirtualCluster, V2VirtualClusters, VcDone)
V2_REQUESTS: tuple[type[BaseModel], ...] = (UserCreate, UserUpdate, MeUpdate, PasswordChange, EmailChange, AdminChange,
                                            UserVirtualClusters, ExtensionChange, GroupRef, Grouplist, GroupCreate,
                                            GroupUpdate, GroupExtensionChange, GroupDescriptionChange,
                                            GroupExternalNameChange, GroupExtensionValue, VcStatusChange)
