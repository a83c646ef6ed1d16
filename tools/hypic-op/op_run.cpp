// `hypic-op run`: one linear-attention operator on safetensors files, the fixed interface that
// external checks drive (issue 3):
//   hypic-op run --variant V --input IN.safetensors --output OUT.safetensors
//                [--method chunked|recurrent] [--chunk-size 64]
// IN (F32): q [T,H,dk], k [T,H,dk], v [T,HV,dv], g [T,HV] or [T,HV,dk] (gated variants),
// beta [T,HV] (delta variants), optional initial_state [HV,dk,dv]. Other tensors are ignored.
// OUT (F32): o [T,HV,dv], final_state [HV,dk,dv], zero_state [HV,dk,dv] and transition
// [HV,dk,dk] (the dense expansion of T_C). Bad input exits 2 with a message naming the tensor
// and the expected shape.
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "gpu/linear/linear_attention.h"
#include "tools/common/subcommand.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_run {
namespace {

struct RunOptions {
  std::string variant;
  std::string input;
  std::string output;
  std::string method = "chunked";
  int chunk_size = linear::ChunkOptions{}.chunk_size;  // the runtime's
};

// A bad-input failure: the message is printed and the tool exits kExitBadInput.
struct InputError {
  std::string message;
};

using Dims = std::vector<int64_t>;

std::string DimsString(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

class InputFile {
 public:
  explicit InputFile(std::shared_ptr<const SafetensorsFile> file) : file_(std::move(file)) {}

  bool Has(const std::string& name) const { return file_->tensors().count(name) != 0; }

  // The dims of F32 tensor `name` of rank `rank`; `layout` names the axes for messages.
  std::optional<InputError> Dims(const std::string& name, int rank, const std::string& layout,
                                 op_run::Dims* dims) const {
    auto info = file_->Info(name);
    if (!info.ok()) {
      return InputError{fmt::format("missing tensor '{}' (expected F32 {})", name, layout)};
    }
    const SafetensorsTensorInfo& ti = **info;
    if (ti.dtype != DType::kF32) {
      return InputError{fmt::format("tensor '{}' has dtype {}, expected F32 {}", name,
                                    DTypeName(ti.dtype), layout)};
    }
    if (ti.shape.rank() != rank) {
      return InputError{
          fmt::format("tensor '{}' has shape {}, expected {}", name, ti.shape.ToString(), layout)};
    }
    dims->clear();
    for (int i = 0; i < rank; ++i) dims->push_back(ti.shape[i]);
    return std::nullopt;
  }

  // Checks `name` has exactly `expect` and reads it.
  std::optional<InputError> Read(const std::string& name, const op_run::Dims& expect,
                                 const std::string& layout, std::vector<float>* out) const {
    op_run::Dims got;
    if (auto e = Dims(name, static_cast<int>(expect.size()), layout, &got)) return e;
    if (got != expect) {
      return InputError{fmt::format("tensor '{}' has shape {}, expected {} = {}", name,
                                    DimsString(got), layout, DimsString(expect))};
    }
    auto bytes = file_->Bytes(name);
    if (!bytes.ok()) return InputError{bytes.status().ToString()};
    out->resize(bytes->size() / sizeof(float));
    if (!bytes->empty()) std::memcpy(out->data(), bytes->data(), bytes->size());
    return std::nullopt;
  }

 private:
  std::shared_ptr<const SafetensorsFile> file_;
};

struct Loaded {
  linear::Shape shape;
  std::vector<float> q, k, v, g, beta, initial;
};

std::optional<InputError> Load(linear::Variant variant, const InputFile& in, Loaded* l) {
  Dims qd;
  if (auto e = in.Dims("q", 3, "[T,H,dk]", &qd)) return e;
  const int64_t T = qd[0], H = qd[1], dk = qd[2];
  if (H <= 0 || dk <= 0) {
    return InputError{
        fmt::format("tensor 'q' has shape {}: H and dk must be positive", DimsString(qd))};
  }
  if (auto e = in.Read("q", qd, "[T,H,dk]", &l->q)) return e;
  if (auto e = in.Read("k", qd, "[T,H,dk]", &l->k)) return e;
  Dims vd;
  if (auto e = in.Dims("v", 3, "[T,HV,dv]", &vd)) return e;
  const int64_t HV = vd[1], dv = vd[2];
  if (vd[0] != T || HV <= 0 || dv <= 0) {
    return InputError{
        fmt::format("tensor 'v' has shape {}, expected [T,HV,dv] with T = {} and positive HV, dv",
                    DimsString(vd), T)};
  }
  if (HV % H != 0) {
    return InputError{fmt::format(
        "tensor 'v' has HV = {} value heads, which is not a multiple of H = {} key heads (from "
        "'q' [T,H,dk])",
        HV, H)};
  }
  if (auto e = in.Read("v", vd, "[T,HV,dv]", &l->v)) return e;
  if (linear::HasGate(variant)) {
    const bool diag = linear::HasDiagGate(variant);
    if (auto e = in.Read("g", diag ? Dims{T, HV, dk} : Dims{T, HV}, diag ? "[T,HV,dk]" : "[T,HV]",
                         &l->g)) {
      return e;
    }
  }
  if (linear::HasBeta(variant)) {
    if (auto e = in.Read("beta", {T, HV}, "[T,HV]", &l->beta)) return e;
  }
  if (in.Has("initial_state")) {
    if (auto e = in.Read("initial_state", {HV, dk, dv}, "[HV,dk,dv]", &l->initial)) return e;
  }
  l->shape = linear::Shape{T, static_cast<int32_t>(H), static_cast<int32_t>(HV),
                           static_cast<int32_t>(dk), static_cast<int32_t>(dv)};
  return std::nullopt;
}

Status Write(const std::string& path, const linear::Shape& s, const std::vector<float>& o,
             const std::vector<float>& final_state, const std::vector<float>& zero_state,
             const std::vector<float>& transition) {
  SafetensorsWriter w;
  auto add = [&](const char* name, Shape shape, const std::vector<float>& x) {
    return w.Add(name, DType::kF32, shape,
                 std::as_bytes(std::span<const float>(x.data(), x.size())));
  };
  HYPIC_RETURN_IF_ERROR(add("o", Shape{s.tokens, s.value_heads, s.dv}, o));
  HYPIC_RETURN_IF_ERROR(add("final_state", Shape{s.value_heads, s.dk, s.dv}, final_state));
  HYPIC_RETURN_IF_ERROR(add("zero_state", Shape{s.value_heads, s.dk, s.dv}, zero_state));
  HYPIC_RETURN_IF_ERROR(add("transition", Shape{s.value_heads, s.dk, s.dk}, transition));
  return w.WriteFile(path);
}

int BadInput(const std::string& message) {
  fmt::print(stderr, "hypic-op run: {}\n", message);
  return kExitBadInput;
}

int Run(const RunOptions& opt) {
  const auto variant = linear::VariantFromName(opt.variant);
  if (!variant) {
    return BadInput(fmt::format(
        "unknown --variant '{}' (linear, retnet, mamba2, gla, deltanet, gdn, kda)", opt.variant));
  }
  if (opt.method != "chunked" && opt.method != "recurrent") {
    return BadInput(fmt::format("--method must be chunked or recurrent, got '{}'", opt.method));
  }
  auto file = SafetensorsFile::Open(opt.input);
  if (!file.ok()) return BadInput(file.status().ToString());
  Loaded l;
  if (auto e = Load(*variant, InputFile(*file), &l)) {
    return BadInput(fmt::format("{} (variant {}, input {})", e->message, opt.variant, opt.input));
  }
  const linear::Shape& s = l.shape;
  const linear::TransitionForm form = linear::TransitionFormOf(*variant);
  const int64_t state_floats = int64_t{s.value_heads} * s.dk * s.dv;
  std::vector<float> o(s.tokens * s.value_heads * s.dv), final_state(state_floats),
      zero_state(state_floats), compact(linear::TransitionFloats(form, s)),
      transition(int64_t{s.value_heads} * s.dk * s.dk);
  const linear::Inputs in{l.q.data(), l.k.data(), l.v.data(), l.g.empty() ? nullptr : l.g.data(),
                          l.beta.empty() ? nullptr : l.beta.data()};
  const linear::Outputs out{o.data(), final_state.data(), zero_state.data(), compact.data()};
  const float* init = l.initial.empty() ? nullptr : l.initial.data();
  Status st = opt.method == "chunked" ? linear::ChunkedForward(*variant, s, in, init, out,
                                                               linear::ChunkOptions{opt.chunk_size})
                                      : linear::RecurrentForward(*variant, s, in, init, out);
  if (!st.ok()) {
    return st.code() == StatusCode::kBadRequest ? BadInput(st.message()) : kExitFailure;
  }
  linear::ExpandTransition(form, s, compact.data(), transition.data());
  st = Write(opt.output, s, o, final_state, zero_state, transition);
  if (!st.ok()) {
    fmt::print(stderr, "hypic-op run: writing {}: {}\n", opt.output, st.ToString());
    return kExitFailure;
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "run", "Run one linear-attention operator on safetensors files", [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<RunOptions>();
      sub.add_option("--variant", opt->variant, "linear, retnet, mamba2, gla, deltanet, gdn or kda")
          ->required();
      sub.add_option("--input", opt->input, "Input safetensors (q, k, v, g, beta, initial_state)")
          ->required();
      sub.add_option("--output", opt->output,
                     "Output safetensors (o, final_state, zero_state, transition)")
          ->required();
      sub.add_option("--method", opt->method, "chunked (default) or recurrent");
      sub.add_option("--chunk-size", opt->chunk_size, "Chunk size: 16, 32 or 64");
      return [opt] { return Run(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::op_run
