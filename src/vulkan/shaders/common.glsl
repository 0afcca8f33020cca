// Conventions every petrel compute shader follows (the host side is vulkan/recorder.h):
// - set 0, bindings 0..n-1: storage buffers, in the order the op's host code passes them; each
//   binding starts where its value, weight or KV storage starts (offsets are 256-byte aligned).
// - one push-constant block (at most 128 bytes) with the op's sizes, declared by each shader to
//   match a C++ struct in its ops_*.cc.
// - constant_id 0 is the workgroup size in x (local_size_x_id = 0).
// - Activations are row-major f32 (row = token). Weights and quantized KV rows are raw bytes
//   read from uint words with the helpers below, so no 8- or 16-bit storage feature is needed.
// - Grids larger than the device's x limit (65535 is the least guaranteed) fold into y: the
//   host passes groups (x, y) from FoldGroups() and the shader takes FlatGroupId().
#ifndef PETREL_COMMON_GLSL
#define PETREL_COMMON_GLSL

#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0) in;

uint FlatGroupId() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// Byte `b` of a uint-word array `words` (little-endian), as a macro so it works on any buffer.
#define BYTE_AT(words, b) (((words)[(b) >> 2] >> (((b) & 3u) * 8u)) & 0xFFu)
// The 16-bit value at even byte offset `b`.
#define U16_AT(words, b) (((words)[(b) >> 2] >> (((b) & 2u) * 8u)) & 0xFFFFu)
// The 32-bit value at byte offset `b` (any alignment).
#define U32_AT(words, b)                                                               \
  ((((b) & 3u) == 0u) ? (words)[(b) >> 2]                                              \
                      : (((words)[(b) >> 2] >> (((b) & 3u) * 8u)) |                    \
                         ((words)[((b) >> 2) + 1u] << (32u - ((b) & 3u) * 8u))))
float HalfToFloat(uint h) { return unpackHalf2x16(h).x; }
float Bf16ToFloat(uint h) { return uintBitsToFloat(h << 16); }

#endif
