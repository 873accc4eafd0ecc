# node-gyp build of the Linux system calls Node.js has no API for (C, Node-API only, libc only:
# no library to install). Needs a C compiler, make and python3 (Debian: gcc make python3);
# scripts/native-build.cjs runs it at `npm ci` and says what is missing. Output:
# build/Release/svc_posix.node, loaded by libs/fs/src/server/local/posix-native.ts.
{
  "targets": [
    {
      "target_name": "svc_posix",
      "sources": ["svc_posix.c"],
      "cflags": ["-std=gnu11", "-Wall", "-Wextra"],
      "defines": ["NAPI_VERSION=8", "_FILE_OFFSET_BITS=64"]
    }
  ]
}
