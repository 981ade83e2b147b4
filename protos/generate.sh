#!/usr/bin/env bash
# Regenerates aioclients/liftbridge/_pb/ from protos/liftbridge/api.proto.
#
# Usage (from anywhere):  protos/generate.sh   [PYTHON]
# PYTHON defaults to the project's .venv/bin/python; it needs the "test"
# extra installed (grpcio-tools for protoc and the gRPC plugin, mypy-protobuf
# for the typed gRPC stub).
#
# Output:
#   api_pb2.py        messages and enums (protoc --python_out)
#   api_pb2.pyi       their type stubs (protoc --pyi_out)
#   api_pb2_grpc.py   APIStub / APIServicer (grpcio-tools plugin), with its
#                     import of api_pb2 made package-relative
#   api_pb2_grpc.pyi  typed APIStub / APIServicer (mypy-protobuf)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:-$root/.venv/bin/python}"
out="$root/aioclients/liftbridge/_pb"
bindir="$(dirname "$python")"

mkdir -p "$out"
rm -f "$out"/api_pb2.py "$out"/api_pb2.pyi "$out"/api_pb2_grpc.py "$out"/api_pb2_grpc.pyi

# -I points at protos/liftbridge so that the file registers as "api.proto",
# the name upstream uses: the serialized descriptor is then byte-identical to
# other Python Liftbridge clients' and both can be imported in one process.
"$python" -m grpc_tools.protoc \
    -I "$root/protos/liftbridge" \
    --python_out="$out" \
    --pyi_out="$out" \
    --grpc_python_out="$out" \
    --plugin=protoc-gen-mypy_grpc="$bindir/protoc-gen-mypy_grpc" \
    --mypy_grpc_out="$out" \
    "$root/protos/liftbridge/api.proto"

# protoc writes top-level imports ("import api_pb2"); inside a package they
# must be relative.
sed -i -e 's/^import api_pb2 as api__pb2$/from . import api_pb2 as api__pb2/' "$out/api_pb2_grpc.py"
sed -i -e 's/^import api_pb2 as _api_pb2$/from . import api_pb2 as _api_pb2/' "$out/api_pb2_grpc.pyi"

if [ ! -f "$out/__init__.py" ]; then
    printf '"""Code generated from protos/liftbridge/api.proto by protos/generate.sh; do not edit."""\n' \
        > "$out/__init__.py"
fi
echo "generated into $out"
