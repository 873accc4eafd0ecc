# node-gyp build of the libfuse 3 low-level binding (C, Node-API only). Needs libfuse 3's headers
# and pkg-config (Debian: libfuse3-dev pkg-config) and a C compiler; scripts/native-build.cjs runs
# it at `npm ci` and says what is missing. Output: build/Release/svc_fuse3.node.
{
  "targets": [
    {
      "target_name": "svc_fuse3",
      "sources": ["svc_fuse3.c"],
      "cflags": ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "<!@(pkg-config --cflags fuse3)"],
      "defines": ["NAPI_VERSION=8", "_FILE_OFFSET_BITS=64"],
      "libraries": ["<!@(pkg-config --libs fuse3)"]
    }
  ]
}
