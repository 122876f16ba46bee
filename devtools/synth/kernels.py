"""Kernel names for the synthetic GPT-2-like exports (`devtools.synth.gpt`).

Demangled and short names in the style of the kernels PyTorch, cuBLAS,
FlashAttention and NCCL launch for GPT-2 training in bf16 on an H100, with a
typical duration each. Made up for the synthetic exports; nothing here was
captured.
"""

from __future__ import annotations

# key -> (demangled name, short name, typical GPU time in µs)
KERNELS: dict[str, tuple[str, str, int]] = {
    "gemm": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_execute_kernel"
        "__5x_cublas",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cluster1x2x1_execute_kernel"
        "__5x_cublas",
        120,
    ),
    "gemm_nn": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas",
        130,
    ),
    "layer_norm": (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
        "vectorized_layer_norm_kernel",
        18,
    ),
    "layer_norm_bwd": (
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::"
        "BFloat16, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)",
        "layer_norm_grad_input_kernel_vectorized",
        25,
    ),
    "gamma_beta_bwd": (
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::"
        "BFloat16, float, 32u, 32u, 256u, false, true, true>(long, long, const T1 *, const T1 *, "
        "const T2 *, const T2 *, T1 *, T1 *)",
        "GammaBetaBackwardCUDAKernelTemplate",
        22,
    ),
    "flash_fwd": (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t>>"
        ", true, false, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)",
        "flash_fwd_kernel",
        210,
    ),
    "flash_bwd": (
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits"
        "<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, "
        "128, 128, 8, cutlass::bfloat16_t>>, true, true, false, false, true, true, false>"
        "(pytorch_flash::Flash_bwd_params)",
        "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        520,
    ),
    "flash_bwd_dq": (
        "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8"
        ", 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, "
        "cutlass::bfloat16_t>>>(pytorch_flash::Flash_bwd_params, int)",
        "flash_bwd_convert_dq_kernel",
        15,
    ),
    "copy": (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::"
        "native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::{lambda()#3}::operator ()() "
        "const::{lambda()#13}::operator ()() const::{lambda(c10::BFloat16)#1}>(at::"
        "TensorIteratorBase &, const T1 &)::{lambda(int)#1}>(int, T3)",
        "elementwise_kernel",
        30,
    ),
    "add": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
        "BFloat16>, std::array<char *, 3>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        20,
    ),
    "gelu": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
        "TensorIteratorBase &, at::native::GeluType)::{lambda()#2}::operator ()() const::{lambda"
        "()#4}::operator ()() const::{lambda(c10::BFloat16)#1}, std::array<char *, 2>>(int, T2, "
        "T3)",
        "vectorized_elementwise_kernel",
        40,
    ),
    "gelu_bwd": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl"
        "(at::TensorIteratorBase &, at::native::GeluType)::{lambda()#2}::operator ()() const::"
        "{lambda()#4}::operator ()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array"
        "<char *, 3>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        55,
    ),
    "dropout": (
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
        "unsigned int, 1, 8, bool>(at::cuda::detail::TensorInfo<const T1, T3>, at::cuda::detail"
        "::TensorInfo<T1, T3>, at::cuda::detail::TensorInfo<T6, T3>, T3, T2, at::PhiloxCudaState)",
        "fused_dropout_kernel_vec",
        25,
    ),
    "dropout_bwd": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor &, const at::Tensor &, const "
        "at::Tensor &, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char *, 3>>(int, T2, "
        "T3)",
        "vectorized_elementwise_kernel",
        22,
    ),
    "cat": (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native"
        "::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(T1 *, at::native::"
        "(anonymous namespace)::CatArrInputTensorMetadata<T1, T2, 128, 1>, at::native::"
        "(anonymous namespace)::TensorSizeStride<T2, 4u>, int, T2)",
        "CatArrayBatchedCopy_aligned16_contig",
        35,
    ),
    "sum": (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
        "func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator ()"
        "(at::TensorIterator &)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>>(T3)",
        "reduce_kernel",
        12,
    ),
    "embedding": (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
        "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<T1, T3>, at::cuda::detail::"
        "TensorInfo<const T1, T3>, at::cuda::detail::TensorInfo<const T2, T3>, int, int, T3, T3, "
        "long)",
        "indexSelectLargeIndex",
        15,
    ),
    "embedding_bwd": (
        "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16"
        ", float, long>(const T3 *, const T1 *, T1 *, int, long, int, int)",
        "embedding_backward_feature_kernel",
        60,
    ),
    "softmax": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, "
        "int)",
        "cunn_SoftMaxForward",
        90,
    ),
    "softmax_bwd": (
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(T2 *, const T4 *, "
        "const T4 *, int)",
        "cunn_SoftMaxBackward",
        95,
    ),
    "nll": (
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
        "float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long)",
        "nll_loss_forward_reduce_cuda_kernel_2d",
        10,
    ),
    "nll_bwd": (
        "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, "
        "long>(T1 *, const T1 *, const T2 *, const T1 *, const T1 *, bool, int, int, long, long)",
        "nll_loss_backward_reduce_cuda_kernel_2d",
        8,
    ),
    "fill": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::"
        "array<char *, 1>>(int, T2, T3)",
        "vectorized_elementwise_kernel",
        3,
    ),
    "adam": (
        "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, at::native"
        "::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double *, double, "
        "double, double, double, double, bool, double *, double *>(T1, T2, T3...)",
        "multi_tensor_apply_kernel",
        300,
    ),
    "nccl": (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        480,
    ),
}

__all__ = ["KERNELS"]
