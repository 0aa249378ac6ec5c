"""Kubernetes protobuf for the list/watch stand-in: JSON-shaped Pods, Nodes, their lists and Status as Go writes them.

kube-apiserver answers a client that prefers ``application/vnd.kubernetes.protobuf`` with
protobuf, so a client's protobuf decoding can only be tested against bytes laid out as the
apiserver's Go marshallers lay them out. This encoder turns the very dicts ``tests/listwatch.py``
serves as JSON into those bytes; nothing in kilter imports it.

``encode(obj, "Pod")`` follows the gogo-generated ``MarshalToSizedBuffer`` of k8s.io/api and
k8s.io/apimachinery (master after v0.36, Kubernetes 1.37 development):

* fields in ascending number; varints for bool and ints (a negative int32 takes ten bytes, as Go
  sign-extends it); strings, bytes and messages length-delimited; repeated fields one record per
  element, never packed; a map one ``{key(1), value(2)}`` entry per pair, keys sorted;
* what Go holds by value is written even when zero or absent from the JSON (``omitempty`` hides it
  there, not in protobuf): an empty string, ``0``, ``false``, an empty struct; what Go holds by
  pointer, and lists and maps, only when present;
* ``Time`` is ``{seconds(1), nanos(2)}`` with nanos always 0 (Go drops them); a zero or null Time
  held by value is an empty message, a null ``*Time`` no field; ``Quantity`` is ``{string(1)}``
  (the string as given: an apiserver would have made it canonical in its JSON too);
  ``IntOrString`` is ``{type(1), intVal(2), strVal(3)}``; ``FieldsV1`` is ``{raw(1)}`` holding
  the compact JSON of the field set;
* ``kind`` and ``apiVersion`` of a Pod, Node, list or Status are not fields: the envelope names
  the type.

The table holds the messages fixtures use, each complete, and only the messages they reach.
A key it does not know raises ``ValueError`` naming the message and the key, so nothing is
dropped silently: add the message to the table (numbers from upstream's generated.proto,
what is written when from its generated.pb.go).
"""

from __future__ import annotations

import calendar
import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = ["MAGIC", "MEDIA_TYPE", "encode", "envelope"]

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"  # the prefix before every protobuf body (runtime/serializer/protobuf)

# One message per line, continued on indented lines; a field is json:number:type and a mark:
# none = written always (Go holds it by value), ? = only when set (a pointer), * = repeated,
# {} = map from string, ^ = a struct Go embeds (its fields sit in the parent's JSON object).
_TABLE = """
PodList metadata:1:ListMeta items:2:Pod*
NodeList metadata:1:ListMeta items:2:Node*
ListMeta selfLink:1:str resourceVersion:2:str continue:3:str remainingItemCount:4:int?
Status metadata:1:ListMeta status:2:str message:3:str reason:4:str details:5:StatusDetails? code:6:int
StatusDetails name:1:str group:2:str kind:3:str causes:4:StatusCause* retryAfterSeconds:5:int uid:6:str
StatusCause reason:1:str message:2:str field:3:str
ObjectMeta name:1:str generateName:2:str namespace:3:str selfLink:4:str uid:5:str resourceVersion:6:str
    generation:7:int creationTimestamp:8:Time deletionTimestamp:9:Time? deletionGracePeriodSeconds:10:int?
    labels:11:str{} annotations:12:str{} ownerReferences:13:OwnerReference* finalizers:14:str*
    managedFields:17:ManagedFieldsEntry*
OwnerReference kind:1:str name:3:str uid:4:str apiVersion:5:str controller:6:bool? blockOwnerDeletion:7:bool?
ManagedFieldsEntry manager:1:str operation:2:str apiVersion:3:str time:4:Time? fieldsType:6:str fieldsV1:7:FieldsV1?
    subresource:8:str
LabelSelector matchLabels:1:str{} matchExpressions:2:LabelSelectorRequirement*
LabelSelectorRequirement key:1:str operator:2:str values:3:str*
Pod metadata:1:ObjectMeta spec:2:PodSpec status:3:PodStatus
PodSpec volumes:1:Volume* containers:2:Container* restartPolicy:3:str terminationGracePeriodSeconds:4:int?
    activeDeadlineSeconds:5:int? dnsPolicy:6:str nodeSelector:7:str{} serviceAccountName:8:str serviceAccount:9:str
    nodeName:10:str hostNetwork:11:bool hostPID:12:bool hostIPC:13:bool securityContext:14:PodSecurityContext?
    imagePullSecrets:15:LocalObjectReference* hostname:16:str subdomain:17:str affinity:18:Affinity?
    schedulerName:19:str initContainers:20:Container* automountServiceAccountToken:21:bool?
    tolerations:22:Toleration* hostAliases:23:HostAlias* priorityClassName:24:str priority:25:int?
    dnsConfig:26:PodDNSConfig? shareProcessNamespace:27:bool? readinessGates:28:PodReadinessGate*
    runtimeClassName:29:str? enableServiceLinks:30:bool? preemptionPolicy:31:str? overhead:32:Quantity{}
    topologySpreadConstraints:33:TopologySpreadConstraint* setHostnameAsFQDN:35:bool? os:36:PodOS?
    hostUsers:37:bool? schedulingGates:38:PodSchedulingGate* resourceClaims:39:PodResourceClaim*
    resources:40:ResourceRequirements? hostnameOverride:41:str?
PodResourceClaim name:1:str resourceClaimName:3:str? resourceClaimTemplateName:4:str?
PodStatus phase:1:str conditions:2:PodCondition* message:3:str reason:4:str hostIP:5:str podIP:6:str
    startTime:7:Time? containerStatuses:8:ContainerStatus* qosClass:9:str initContainerStatuses:10:ContainerStatus*
    nominatedNodeName:11:str podIPs:12:PodIP* ephemeralContainerStatuses:13:ContainerStatus* resize:14:str
    hostIPs:16:HostIP* observedGeneration:17:int allocatedResources:19:Quantity{} resources:20:ResourceRequirements?
Volume name:1:str volumeSource:2:VolumeSource^
VolumeSource hostPath:1:HostPathVolumeSource? emptyDir:2:EmptyDirVolumeSource? secret:6:SecretVolumeSource?
    persistentVolumeClaim:10:PersistentVolumeClaimVolumeSource? downwardAPI:16:DownwardAPIVolumeSource?
    configMap:19:ConfigMapVolumeSource? projected:26:ProjectedVolumeSource? csi:28:CSIVolumeSource?
HostPathVolumeSource path:1:str type:2:str?
EmptyDirVolumeSource medium:1:str sizeLimit:2:Quantity? mode:3:int?
SecretVolumeSource secretName:1:str items:2:KeyToPath* defaultMode:3:int? optional:4:bool? defaultUser:5:int?
ConfigMapVolumeSource localObjectReference:1:LocalObjectReference^ items:2:KeyToPath* defaultMode:3:int?
    optional:4:bool? defaultUser:5:int?
PersistentVolumeClaimVolumeSource claimName:1:str readOnly:2:bool
DownwardAPIVolumeSource items:1:DownwardAPIVolumeFile* defaultMode:2:int? defaultUser:3:int?
DownwardAPIVolumeFile path:1:str fieldRef:2:ObjectFieldSelector? resourceFieldRef:3:ResourceFieldSelector?
    mode:4:int? user:5:int?
KeyToPath key:1:str path:2:str mode:3:int? user:4:int?
ProjectedVolumeSource sources:1:VolumeProjection* defaultMode:2:int? defaultUser:3:int?
VolumeProjection secret:1:SecretProjection? downwardAPI:2:DownwardAPIProjection? configMap:3:ConfigMapProjection?
    serviceAccountToken:4:ServiceAccountTokenProjection?
SecretProjection localObjectReference:1:LocalObjectReference^ items:2:KeyToPath* optional:4:bool?
ConfigMapProjection localObjectReference:1:LocalObjectReference^ items:2:KeyToPath* optional:4:bool?
DownwardAPIProjection items:1:DownwardAPIVolumeFile*
ServiceAccountTokenProjection audience:1:str expirationSeconds:2:int? path:3:str user:4:int?
CSIVolumeSource driver:1:str readOnly:2:bool? fsType:3:str? volumeAttributes:4:str{}
    nodePublishSecretRef:5:LocalObjectReference?
Container name:1:str image:2:str command:3:str* args:4:str* workingDir:5:str ports:6:ContainerPort* env:7:EnvVar*
    resources:8:ResourceRequirements volumeMounts:9:VolumeMount* livenessProbe:10:Probe? readinessProbe:11:Probe?
    lifecycle:12:Lifecycle? terminationMessagePath:13:str imagePullPolicy:14:str securityContext:15:SecurityContext?
    stdin:16:bool stdinOnce:17:bool tty:18:bool envFrom:19:EnvFromSource* terminationMessagePolicy:20:str
    volumeDevices:21:VolumeDevice* startupProbe:22:Probe? resizePolicy:23:ContainerResizePolicy*
    restartPolicy:24:str?
ContainerPort name:1:str hostPort:2:int containerPort:3:int protocol:4:str hostIP:5:str
EnvVar name:1:str value:2:str valueFrom:3:EnvVarSource?
EnvVarSource fieldRef:1:ObjectFieldSelector? resourceFieldRef:2:ResourceFieldSelector?
    configMapKeyRef:3:ConfigMapKeySelector? secretKeyRef:4:SecretKeySelector?
ObjectFieldSelector apiVersion:1:str fieldPath:2:str
ResourceFieldSelector containerName:1:str resource:2:str divisor:3:Quantity
ConfigMapKeySelector localObjectReference:1:LocalObjectReference^ key:2:str optional:3:bool?
SecretKeySelector localObjectReference:1:LocalObjectReference^ key:2:str optional:3:bool?
EnvFromSource prefix:1:str configMapRef:2:ConfigMapEnvSource? secretRef:3:SecretEnvSource?
ConfigMapEnvSource localObjectReference:1:LocalObjectReference^ optional:2:bool?
SecretEnvSource localObjectReference:1:LocalObjectReference^ optional:2:bool?
LocalObjectReference name:1:str
ResourceRequirements limits:1:Quantity{} requests:2:Quantity{} claims:3:ResourceClaim*
ResourceClaim name:1:str request:2:str
VolumeMount name:1:str readOnly:2:bool mountPath:3:str subPath:4:str mountPropagation:5:str? subPathExpr:6:str
    recursiveReadOnly:7:str? bindMountOptions:8:str*
VolumeDevice name:1:str devicePath:2:str
Probe handler:1:ProbeHandler^ initialDelaySeconds:2:int timeoutSeconds:3:int periodSeconds:4:int
    successThreshold:5:int failureThreshold:6:int terminationGracePeriodSeconds:7:int?
ProbeHandler exec:1:ExecAction? httpGet:2:HTTPGetAction? tcpSocket:3:TCPSocketAction? grpc:4:GRPCAction?
ExecAction command:1:str*
HTTPGetAction path:1:str port:2:IntOrString host:3:str scheme:4:str httpHeaders:5:HTTPHeader* protocol:6:str?
HTTPHeader name:1:str value:2:str
TCPSocketAction port:1:IntOrString host:2:str
GRPCAction port:1:int service:2:str? mode:3:str?
Lifecycle postStart:1:LifecycleHandler? preStop:2:LifecycleHandler? stopSignal:3:str?
LifecycleHandler exec:1:ExecAction? httpGet:2:HTTPGetAction? tcpSocket:3:TCPSocketAction? sleep:4:SleepAction?
SleepAction seconds:1:int
SecurityContext capabilities:1:Capabilities? privileged:2:bool? seLinuxOptions:3:SELinuxOptions? runAsUser:4:int?
    runAsNonRoot:5:bool? readOnlyRootFilesystem:6:bool? allowPrivilegeEscalation:7:bool? runAsGroup:8:int?
    procMount:9:str? seccompProfile:11:SeccompProfile? appArmorProfile:12:AppArmorProfile?
Capabilities add:1:str* drop:2:str*
SELinuxOptions user:1:str role:2:str type:3:str level:4:str
SeccompProfile type:1:str localhostProfile:2:str?
AppArmorProfile type:1:str localhostProfile:2:str?
PodSecurityContext seLinuxOptions:1:SELinuxOptions? runAsUser:2:int? runAsNonRoot:3:bool? supplementalGroups:4:int*
    fsGroup:5:int? runAsGroup:6:int? sysctls:7:Sysctl* fsGroupChangePolicy:9:str? seccompProfile:10:SeccompProfile?
    appArmorProfile:11:AppArmorProfile? supplementalGroupsPolicy:12:str? seLinuxChangePolicy:13:str?
Sysctl name:1:str value:2:str
ContainerResizePolicy resourceName:1:str restartPolicy:2:str
Affinity nodeAffinity:1:NodeAffinity? podAffinity:2:PodAffinity? podAntiAffinity:3:PodAntiAffinity?
NodeAffinity requiredDuringSchedulingIgnoredDuringExecution:1:NodeSelector?
    preferredDuringSchedulingIgnoredDuringExecution:2:PreferredSchedulingTerm*
NodeSelector nodeSelectorTerms:1:NodeSelectorTerm*
NodeSelectorTerm matchExpressions:1:NodeSelectorRequirement* matchFields:2:NodeSelectorRequirement*
NodeSelectorRequirement key:1:str operator:2:str values:3:str*
PreferredSchedulingTerm weight:1:int preference:2:NodeSelectorTerm
PodAffinity requiredDuringSchedulingIgnoredDuringExecution:1:PodAffinityTerm*
    preferredDuringSchedulingIgnoredDuringExecution:2:WeightedPodAffinityTerm*
PodAntiAffinity requiredDuringSchedulingIgnoredDuringExecution:1:PodAffinityTerm*
    preferredDuringSchedulingIgnoredDuringExecution:2:WeightedPodAffinityTerm*
PodAffinityTerm labelSelector:1:LabelSelector? namespaces:2:str* topologyKey:3:str
    namespaceSelector:4:LabelSelector? matchLabelKeys:5:str* mismatchLabelKeys:6:str*
WeightedPodAffinityTerm weight:1:int podAffinityTerm:2:PodAffinityTerm
Toleration key:1:str operator:2:str value:3:str effect:4:str tolerationSeconds:5:int?
TopologySpreadConstraint maxSkew:1:int topologyKey:2:str whenUnsatisfiable:3:str labelSelector:4:LabelSelector?
    minDomains:5:int? nodeAffinityPolicy:6:str? nodeTaintsPolicy:7:str? matchLabelKeys:8:str*
PodSchedulingGate name:1:str
PodOS name:1:str
PodReadinessGate conditionType:1:str
HostAlias ip:1:str hostnames:2:str*
PodDNSConfig nameservers:1:str* searches:2:str* options:3:PodDNSConfigOption*
PodDNSConfigOption name:1:str value:2:str?
PodCondition type:1:str status:2:str lastProbeTime:3:Time lastTransitionTime:4:Time reason:5:str message:6:str
    observedGeneration:7:int
HostIP ip:1:str
PodIP ip:1:str
ContainerStatus name:1:str state:2:ContainerState lastState:3:ContainerState ready:4:bool restartCount:5:int
    image:6:str imageID:7:str containerID:8:str started:9:bool? allocatedResources:10:Quantity{}
    resources:11:ResourceRequirements? volumeMounts:12:VolumeMountStatus* stopSignal:15:str?
ContainerState waiting:1:ContainerStateWaiting? running:2:ContainerStateRunning?
    terminated:3:ContainerStateTerminated?
ContainerStateWaiting reason:1:str message:2:str
ContainerStateRunning startedAt:1:Time
ContainerStateTerminated exitCode:1:int signal:2:int reason:3:str message:4:str startedAt:5:Time finishedAt:6:Time
    containerID:7:str
VolumeMountStatus name:1:str mountPath:2:str readOnly:3:bool recursiveReadOnly:4:str?
Node metadata:1:ObjectMeta spec:2:NodeSpec status:3:NodeStatus
NodeSpec podCIDR:1:str externalID:2:str providerID:3:str unschedulable:4:bool taints:5:Taint* podCIDRs:7:str*
Taint key:1:str value:2:str effect:3:str timeAdded:4:Time?
NodeStatus capacity:1:Quantity{} allocatable:2:Quantity{} phase:3:str conditions:4:NodeCondition*
    addresses:5:NodeAddress* daemonEndpoints:6:NodeDaemonEndpoints nodeInfo:7:NodeSystemInfo
    images:8:ContainerImage* volumesInUse:9:str* volumesAttached:10:AttachedVolume*
    runtimeHandlers:12:NodeRuntimeHandler* features:13:NodeFeatures? declaredFeatures:14:str*
NodeCondition type:1:str status:2:str lastHeartbeatTime:3:Time lastTransitionTime:4:Time reason:5:str message:6:str
NodeAddress type:1:str address:2:str
NodeDaemonEndpoints kubeletEndpoint:1:DaemonEndpoint
DaemonEndpoint Port:1:int
NodeSystemInfo machineID:1:str systemUUID:2:str bootID:3:str kernelVersion:4:str osImage:5:str
    containerRuntimeVersion:6:str kubeletVersion:7:str kubeProxyVersion:8:str operatingSystem:9:str
    architecture:10:str swap:11:NodeSwapStatus?
NodeSwapStatus capacity:1:int?
ContainerImage names:1:str* sizeBytes:2:int
AttachedVolume name:1:str devicePath:2:str
NodeRuntimeHandler name:1:str features:2:NodeRuntimeHandlerFeatures?
NodeRuntimeHandlerFeatures recursiveReadOnlyMounts:1:bool? userNamespaces:2:bool?
NodeFeatures supplementalGroupsPolicy:1:bool?
"""
_TYPED = frozenset({"Pod", "Node", "PodList", "NodeList", "Status"})  # kind and apiVersion live in the envelope


_SMALL = [bytes((n,)) for n in range(0x80)]


class _Field(NamedTuple):
    key: str  # the JSON key; for an embedded struct, its proto name
    tag: bytes
    type: str
    mark: str
    where: str  # Message.key, for errors
    nested: bool  # a message of the table


class _Message(NamedTuple):
    fields: tuple[_Field, ...]
    keys: frozenset[str]  # every key the JSON object may have


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _SMALL[n]
    n &= 0xFFFFFFFFFFFFFFFF  # two's complement, as Go's uint64(int64(v))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _parse(table: str) -> dict[str, _Message]:
    fields: dict[str, list[_Field]] = {}
    current: list[_Field] = []
    name = ""
    for token in table.split():
        if ":" not in token:
            name = token
            current = fields.setdefault(name, [])
            continue
        key, number, kind = token.split(":")
        type_ = kind.rstrip("?*{}^")
        mark = kind[len(type_) :]
        wire = 0 if type_ in ("int", "bool") and mark != "{}" else 2
        nested = type_ not in ("str", "int", "bool", "Time", "Quantity", "IntOrString", "FieldsV1")
        current.append(_Field(key, _varint(int(number) << 3 | wire), type_, mark, f"{name}.{key}", nested))

    def keys(name: str) -> frozenset[str]:
        own = {f.key for f in fields[name] if f.mark != "^"}
        for f in fields[name]:
            if f.mark == "^":
                own |= keys(f.type)
        return frozenset(own | ({"kind", "apiVersion"} if name in _TYPED else set()))

    return {name: _Message(tuple(fs), keys(name)) for name, fs in fields.items()}


_MESSAGES = _parse(_TABLE)
_GO_ZERO_TIME = -62135596800  # 0001-01-01T00:00:00Z: Go's zero Time, which marshals to nothing


def encode(obj: dict[str, Any], message: str, *, memo: dict[tuple[int, str], bytes] | None = None) -> bytes:
    """The protobuf bytes of ``message`` (``"Pod"``, ``"NodeList"``, ``"Status"``, ...) for a JSON-shaped object.

    ``memo`` remembers each nested object's bytes by its identity, for a caller
    encoding many objects that share parts (the bench's 150,000 pods); the
    objects must stay alive and unchanged while the memo is in use.
    """
    if message not in _MESSAGES:
        raise ValueError(f"no protobuf message {message!r} in the table")
    return bytes(_message(obj, message, memo))


def envelope(raw: bytes, api_version: str, kind: str) -> bytes:
    """The body kube-apiserver sends: the magic, then ``runtime.Unknown`` wrapping ``raw`` (empty strings written)."""
    return envelope_of([raw], api_version, kind)


def envelope_of(parts: Sequence[bytes], api_version: str, kind: str) -> bytes:
    """``envelope`` of the concatenated ``parts``, joined once: a bench page is megabytes of pre-encoded items."""
    type_meta = bytearray()  # runtime.TypeMeta: apiVersion is field 1, kind field 2
    _put(type_meta, b"\x0a", api_version.encode())
    _put(type_meta, b"\x12", kind.encode())
    head = bytearray(MAGIC)
    _put(head, b"\x0a", type_meta)
    head += b"\x12" + _varint(sum(len(part) for part in parts))
    return b"".join((head, *parts, b"\x1a\x00\x22\x00"))  # then contentEncoding, contentType


def _put(out: bytearray, tag: bytes, body: bytes | bytearray) -> None:
    size = len(body)
    out += tag
    out += _SMALL[size] if size < 0x80 else _varint(size)
    out += body


def _message(obj: Any, name: str, memo: dict[tuple[int, str], bytes] | None = None) -> bytes | bytearray:
    if memo is None:
        return _fields(obj, name, None)
    key = (id(obj), name)
    got = memo.get(key)
    if got is None:
        got = memo[key] = bytes(_fields(obj, name, memo))
    return got


def _fields(obj: Any, name: str, memo: dict[tuple[int, str], bytes] | None) -> bytearray:
    if not isinstance(obj, dict):
        raise ValueError(f"{name}: expected an object, got {obj!r}")
    spec = _MESSAGES[name]
    if not spec.keys.issuperset(obj):
        raise ValueError(f"{name} has no field {min(obj.keys() - spec.keys)!r} in the table")
    out = bytearray()
    for f in spec.fields:
        mark = f.mark
        if mark == "^":
            inline = _MESSAGES[f.type].keys
            _put(out, f.tag, _fields({k: v for k, v in obj.items() if k in inline}, f.type, memo))  # a temporary
            continue
        value = obj.get(f.key)
        if value is None:
            if not mark:  # held by value: its zero is written
                _value(out, f.tag, f.type, None, f.where)
        elif mark == "*":
            if not isinstance(value, list):
                raise ValueError(f"{f.where}: expected a list, got {value!r}")
            for item in value:
                if f.nested and type(item) is dict:
                    _put(out, f.tag, _message(item, f.type, memo))
                else:
                    _value(out, f.tag, f.type, item, f.where)
        elif mark == "{}":
            if not isinstance(value, dict):
                raise ValueError(f"{f.where}: expected an object, got {value!r}")
            for k in sorted(value):
                entry = bytearray()
                _put(entry, b"\x0a", k.encode())
                _value(entry, b"\x12", f.type, value[k], f.where)
                _put(out, f.tag, entry)
        elif f.nested and type(value) is dict:
            _put(out, f.tag, _message(value, f.type, memo))
        elif f.type == "str" and type(value) is str:
            _put(out, f.tag, value.encode())
        else:
            _value(out, f.tag, f.type, value, f.where)
    return out


def _value(out: bytearray, tag: bytes, type_: str, value: Any, where: str) -> None:
    """One record; ``None`` (absent, or JSON null) is Go's zero value."""
    if type_ == "str":
        if not isinstance(value, str | None):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        _put(out, tag, (value or "").encode())
    elif type_ == "int":
        if not isinstance(value, int | None) or isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        out += tag
        out += _varint(value or 0)
    elif type_ == "bool":
        if not isinstance(value, bool | None):
            raise ValueError(f"{where}: expected a boolean, got {value!r}")
        out += tag
        out.append(1 if value else 0)
    elif type_ == "Time":
        if not isinstance(value, str | None):
            raise ValueError(f"{where}: expected an RFC 3339 time, got {value!r}")
        _put(out, tag, _time(value, where) if value else b"")
    elif type_ == "Quantity":
        if not isinstance(value, str | int | None) or isinstance(value, bool):
            raise ValueError(f"{where}: expected a quantity, got {value!r}")
        body = bytearray()
        _put(body, b"\x0a", str("0" if value is None else value).encode())
        _put(out, tag, body)
    elif type_ == "IntOrString":
        if isinstance(value, str):
            body = bytearray(b"\x08\x01\x10\x00")
            _put(body, b"\x1a", value.encode())
        elif isinstance(value, int | None) and not isinstance(value, bool):
            body = bytearray(b"\x08\x00\x10" + _varint(value or 0) + b"\x1a\x00")
        else:
            raise ValueError(f"{where}: expected an integer or a string, got {value!r}")
        _put(out, tag, body)
    elif type_ == "FieldsV1":
        body = bytearray()
        _put(body, b"\x0a", json.dumps(value, separators=(",", ":")).encode())
        _put(out, tag, body)
    else:
        _put(out, tag, _message({} if value is None else value, type_))


@lru_cache(maxsize=4096)
def _time(value: str, where: str) -> bytes:
    """``{seconds, nanos=0}``: kube's Time keeps whole seconds on the wire, as in its JSON."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ValueError(f"{where}: {value!r} is not an RFC 3339 time")
    seconds = calendar.timegm(moment.utctimetuple())
    return b"" if seconds == _GO_ZERO_TIME else b"\x08" + _varint(seconds) + b"\x10\x00"
