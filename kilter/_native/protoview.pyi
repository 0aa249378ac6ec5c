from collections.abc import Callable, Mapping
from typing import Any

from typing_extensions import Buffer

STRING: int
SHARED_STRING: int
BOOL: int
INT: int
MESSAGE: int
TIME: int
QUANTITY: int
STRING_MAP: int
QUANTITY_MAP: int
REPEATED: int
SHARED: int
MAGIC: bytes

class ProtobufError(ValueError): ...

class Message:
    build: Callable[..., Any]
    defaults: tuple[Any, ...]
    fields: dict[int, tuple[int, int, Message | None, int]]
    dedup: bool
    def __init__(
        self,
        build: Callable[..., Any],
        defaults: tuple[Any, ...],
        fields: Mapping[int, tuple[int, int, Message | None, int]],
        *,
        dedup: bool = False,
    ) -> None: ...

class Decoder:
    def __init__(self) -> None: ...
    def decode(self, message: Message, data: Buffer) -> Any: ...
    def unwrap(self, data: bytes) -> tuple[str, str, memoryview]: ...
    def decode_list(
        self, meta: Message, item: Message, data: Buffer, on_error: Callable[[int, str], None] | None = None
    ) -> tuple[Any, list[Any]]: ...
