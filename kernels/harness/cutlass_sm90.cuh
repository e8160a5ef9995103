// The CUTLASS side of the GEMM benchmarks: one template, CutlassGemm, that builds a CUTLASS 3.x
// sm90 TMA warp-specialized GEMM for a configuration-table line and runs it on GemmProblems
// (cutlass_bench_api.cuh). Included by the configuration translation units only.
//
// A = W [n, k] K-major ("RowMajor" M x K) in the weight type, B = X [rows, k] BF16 K-major
// ("ColumnMajor" K x N), D = Y^T [n, rows] BF16 column-major, f32 accumulation, no source C
// (D = acc). The mainloop comes from CUTLASS's CollectiveBuilder:
//   BF16 weights: the shared-memory-sourced (SS) mainloop, both operands through TMA and wgmma.
//   u8 / s8 / s4 weights: the builder sees operands of different widths and picks the mixed-input
//     register-sourced (RS) mainloop (sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp) in
//     its convert-only mode (no scales): the consumer warpgroups copy W's tile from shared memory
//     to registers, convert it to BF16 (cutlass::NumericArrayConverter) and issue wgmma with A from
//     registers. The narrow operand is A and K-major, so no implicit swap happens and the TMA
//     epilogue applies.
//   bf16rs: BF16 weights through that same mixed-input RS mainloop (identity conversion). The
//     builder only takes that path for operands of different widths, so the collective is
//     assembled here as the builder does it, with the mixed-input dispatch policy.
#pragma once

#include "cutlass_bench_api.cuh"

#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace cg {
using namespace cute;

// Schedules: WS one consumer warpgroup, not persistent; PP two consumer warpgroups, a tile
// each, persistent; COOP two consumer warpgroups share a tile (tile M >= 128).
struct WS {
  using Main = cutlass::gemm::KernelTmaWarpSpecialized;
  using Epi = cutlass::epilogue::TmaWarpSpecialized;
};
struct PP {
  using Main = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epi = cutlass::epilogue::TmaWarpSpecialized;
};
struct COOP {
  using Main = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epi = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
using SchedDefault = void;
using SchedPersistent = cutlass::gemm::PersistentScheduler;
using SchedStreamK = cutlass::gemm::StreamKScheduler;

// Weight types: the element and whether BF16 is forced through the RS mixed-input mainloop.
template <class E, WType T, bool RS = false>
struct WeightKind {
  using Element = E;
  static constexpr WType kType = T;
  static constexpr bool kForceRs = RS;
};
using W_bf16 = WeightKind<cutlass::bfloat16_t, WType::kBf16>;
using W_u8 = WeightKind<uint8_t, WType::kU8>;
using W_s8 = WeightKind<int8_t, WType::kS8>;
using W_s4 = WeightKind<cutlass::int4b_t, WType::kS4>;
using W_bf16rs = WeightKind<cutlass::bfloat16_t, WType::kBf16Rs, true>;

using ElementX = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::ColumnMajor;

// The mainloop collective: CUTLASS's builder, which picks SS or mixed-input RS by the types.
template <class WK, class TileShape, class ClusterShape, class Stages, class Schedule,
          bool ForceRs = WK::kForceRs>
struct MainloopOf {
  using Element = typename WK::Element;
  using type = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA,
      128 / cutlass::sizeof_bits<Element>::value, ElementX, LayoutB, 8, float, TileShape,
      ClusterShape, Stages, Schedule>::CollectiveOp;
};

// BF16 A through the mixed-input RS mainloop: the builder's RS branch
// (builders/sm90_gmma_builder.inl, "GMMA_TMA_WS_RS") with its IsMixedInput taken as true and
// A = tuple<bf16> (the transformed operand, convert-only).
template <class WK, class TileShape, class ClusterShape, class Stages, class Schedule>
struct MainloopOf<WK, TileShape, ClusterShape, Stages, Schedule, true> {
  using E = cutlass::bfloat16_t;
  using AtomLayoutMNK =
      cute::conditional_t<cute::is_same_v<Schedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
                          Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _1, _1>>>;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<E, E, float, TileShape, GMMA::Major::K, GMMA::Major::K>(),
      AtomLayoutMNK{}));
  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<0>(ClusterShape{})));
  using SmemLayoutAtomA = decltype(cutlass::gemm::collective::detail::rs_smem_selector<
      GMMA::Major::K, E, decltype(get<0>(TileShape{})), decltype(get<2>(TileShape{})), false>());
  using SmemLayoutAtomB = decltype(cutlass::gemm::collective::detail::rs_smem_selector<
      GMMA::Major::K, E, decltype(get<1>(TileShape{})), decltype(get<2>(TileShape{})), false>());
  static constexpr int kSmemAlignment =
      static_cast<int>(cute::max(cutlass::detail::alignment_for_swizzle(SmemLayoutAtomA{}),
                                 cutlass::detail::alignment_for_swizzle(SmemLayoutAtomB{})));
  static constexpr int kStages = cutlass::gemm::collective::detail::
      compute_stage_count_or_override_single_affine_transformed_input<
          cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, E, E, void, void, TileShape,
          Stages::bytes, kSmemAlignment>(Stages{});
  using type = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm90TmaGmmaRmemAWarpSpecializedMixedInput<kStages, ClusterShape,
                                                                        Schedule>,
      TileShape, cute::tuple<E>, cutlass::detail::TagToStrideA_t<LayoutA>, E,
      cutlass::detail::TagToStrideB_t<LayoutB>, TiledMma, GmemTiledCopyA, SmemLayoutAtomA,
      Copy_Atom<cute::AutoVectorizingCopy, E>, cute::identity, GmemTiledCopyB, SmemLayoutAtomB,
      void, cute::identity>;
};

template <class WK, class Schedule, int TM, int TN, int TK, int CM, class Scheduler>
struct CutlassGemm final : GemmConfig {
  using ElementW = typename WK::Element;
  static constexpr int kAlignD = 8;  // 16 bytes: what TMA needs
  using TileShape = Shape<Int<TM>, Int<TN>, Int<TK>>;
  using ClusterShape = Shape<Int<CM>, _1, _1>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD,
      ElementX, LayoutD, kAlignD, typename Schedule::Epi,
      cutlass::epilogue::fusion::LinearCombination<ElementX, float, void, float>>::CollectiveOp;
  using Mainloop = typename MainloopOf<
      WK, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Main>::type;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr bool kStreamK = std::is_same_v<Scheduler, SchedStreamK>;

  std::vector<Gemm> ops;
  std::vector<typename Gemm::Arguments> arguments;
  std::vector<void*> workspaces;

  std::string describe() const override {
    char s[160];
    snprintf(s, sizeof s, "%u threads, %d B shared, %d stages", unsigned(Kernel::MaxThreadsPerBlock),
             int(Kernel::SharedStorageSize), int(Mainloop::DispatchPolicy::Stages));
    return s;
  }

  std::string prepare(const GemmProblem& p, cudaStream_t stream) override {
    release();
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    auto sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(p.n, p.k, 1));
    auto sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(p.rows, p.k, 1));
    auto sc = cutlass::make_cute_packed_stride(StrideC{}, make_shape(p.n, p.rows, 1));
    auto sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(p.n, p.rows, 1));
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = p.sm_count;
    ops.resize(p.weights.size());
    for (size_t c = 0; c < p.weights.size(); ++c) {
      typename Gemm::Arguments args{
          cutlass::gemm::GemmUniversalMode::kGemm,
          {p.n, p.rows, p.k, 1},
          {static_cast<ElementW const*>(p.weights[c]), sa, static_cast<ElementX const*>(p.x), sb},
          {{}, nullptr, sc, static_cast<ElementX*>(p.y), sd},
          hw};
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
      if constexpr (kStreamK) {
        using Decomposition = cutlass::gemm::kernel::detail::DecompositionMode;
        if (p.splits > 1) {
          args.scheduler.splits = p.splits;
          args.scheduler.decomposition_mode = Decomposition::SplitK;
        }
      }
      cutlass::Status st = Gemm::can_implement(args);
      if (st != cutlass::Status::kSuccess) {
        release();
        return std::string("can_implement: ") + cutlassGetStatusString(st);
      }
      size_t ws_bytes = Gemm::get_workspace_size(args);
      void* ws = nullptr;
      if (ws_bytes > 0) {
        cudaError_t e = cudaMalloc(&ws, ws_bytes);
        if (e != cudaSuccess) {
          release();
          return std::string("workspace cudaMalloc: ") + cudaGetErrorString(e);
        }
      }
      workspaces.push_back(ws);
      arguments.push_back(args);
      st = ops[c].initialize(args, ws, stream);
      if (st != cutlass::Status::kSuccess) {
        cudaError_t e = cudaGetLastError();
        release();
        return std::string("initialize: ") + cutlassGetStatusString(st) + " (" +
               cudaGetErrorString(e) + ")";
      }
    }
    return "";
  }

  cudaError_t launch(int copy, cudaStream_t stream) override {
    cutlass::Status st = cutlass::Status::kSuccess;
    if constexpr (kStreamK) {
      // The stream-K / split-K turnstile counters only count up: like CUTLASS's own
      // run(arguments, workspace), clear them (a memset on the stream, when the decomposition
      // uses any) before every launch.
      st = Kernel::initialize_workspace(arguments[size_t(copy)], workspaces[size_t(copy)], stream);
      if (st != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
    }
    st = ops[size_t(copy)].run(stream);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return st == cutlass::Status::kSuccess ? cudaSuccess : cudaErrorLaunchFailure;
  }

  void release() override {
    for (void* w : workspaces)
      if (w) cudaFree(w);
    workspaces.clear();
    arguments.clear();
    ops.clear();
  }
  ~CutlassGemm() override { release(); }
};
}  // namespace cg

// Defines make_NAME() for a table line X(NAME, W, S, TM, TN, TK, CM, SCHED).
#define CB_DEFINE(name, W, S, TM, TN, TK, CM, SCHED)                                            \
  std::unique_ptr<GemmConfig> make_##name() {                                                   \
    return std::make_unique<cg::CutlassGemm<cg::W_##W, cg::S, TM, TN, TK, CM, cg::Sched##SCHED>>(); \
  }
