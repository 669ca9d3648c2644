#!/usr/bin/env python3
"""tensorboard_proto.py: C code for TensorBoard's event records, generated at build
time by protoc-c from TensorBoard's own protocol definitions.

    tensorboard_proto.py --find
        prints the directory of the installed `tensorboard` Python package (found
        without importing it), or exits 1.
    tensorboard_proto.py PACKAGE_DIR PROTOC_C OUT_DIR
        writes OUT_DIR/<name>.pb-c.c and .pb-c.h for event.proto and the files it
        imports (summary, histogram, tensor, resource_handle, tensor_shape, types).

The tensorboard wheel ships each .proto as the serialized FileDescriptorProto its
generated `*_pb2.py` registers (AddSerializedFile(b'...')), not as .proto text.
Those descriptors are read from the Python source (no protobuf runtime needed),
framed as a FileDescriptorSet (field 1, length-delimited, per file) and handed to
protoc-c with --descriptor_set_in. protoc-c writes tensorboard/compat/proto/*.pb-c.*;
they are copied flat into OUT_DIR, their includes of one another made relative.
"""
import ast
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

# event.proto and everything it imports, each before the files that import it.
NAMES = ["types", "tensor_shape", "resource_handle", "tensor", "histogram", "summary", "event"]
PREFIX = "tensorboard/compat/proto/"


def find_package():
    spec = importlib.util.find_spec("tensorboard")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def serialized_descriptor(path):
    """The bytes literal passed to AddSerializedFile in a generated _pb2.py."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant)):
            return node.args[0].value
    sys.exit(f"tensorboard_proto.py: {path}: no serialized descriptor")


def generate(package, protoc_c, out_dir):
    descriptor_set = b""
    for name in NAMES:
        d = serialized_descriptor(os.path.join(package, "compat", "proto", name + "_pb2.py"))
        descriptor_set += b"\x0a" + varint(len(d)) + d
    with tempfile.TemporaryDirectory() as tmp:
        set_path = os.path.join(tmp, "tensorboard.pb")
        with open(set_path, "wb") as f:
            f.write(descriptor_set)
        subprocess.run([protoc_c, "--descriptor_set_in=" + set_path, "--c_out=" + tmp]
                       + [PREFIX + n + ".proto" for n in NAMES], check=True)
        os.makedirs(out_dir, exist_ok=True)
        for name in NAMES:
            for ext in (".pb-c.c", ".pb-c.h"):
                text = open(os.path.join(tmp, PREFIX + name + ext), encoding="utf-8").read()
                text = re.sub(r'#include "' + re.escape(PREFIX), '#include "', text)
                with open(os.path.join(out_dir, name + ext), "w", encoding="utf-8") as f:
                    f.write(text)


def main():
    if sys.argv[1:] == ["--find"]:
        package = find_package()
        if not package:
            return 1
        print(package)
        return 0
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    generate(*sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
