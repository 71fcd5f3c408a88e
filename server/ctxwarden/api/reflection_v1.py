"""``grpc.reflection.v1`` beside ``v1alpha``.

grpcio-reflection 1.85 ships only v1alpha. The v1 protocol is the same
messages under another package, so the same servicer answers both: this module
registers a v1 copy of the reflection file descriptor (so v1 clients can
describe the v1 service too) and a v1 handler that uses the v1alpha codecs.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_ALPHA = "grpc.reflection.v1alpha"
_V1 = "grpc.reflection.v1"


def _register_descriptor() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindServiceByName(SERVICE_NAME)
        return
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(fdp)
    fdp.name = "grpc/reflection/v1/reflection.proto"
    fdp.package = _V1
    for message in fdp.message_type:
        for f in message.field:
            if f.type_name:
                f.type_name = f.type_name.replace(f".{_ALPHA}.", f".{_V1}.")
    for service in fdp.service:
        for m in service.method:
            m.input_type = m.input_type.replace(f".{_ALPHA}.", f".{_V1}.")
            m.output_type = m.output_type.replace(f".{_ALPHA}.", f".{_V1}.")
    pool.Add(fdp)


def enable(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection v1alpha and v1 for ``service_names`` (both reflection names added)."""
    _register_descriptor()
    names = (*service_names, reflection.SERVICE_NAME, SERVICE_NAME)
    servicer: Any = reflection.aio.ReflectionServicer(names)
    reflection.enable_server_reflection(names, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, {"ServerReflectionInfo": handler}),)
    )
