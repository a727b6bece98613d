#pragma once

// The layers of af::nn (see layer.hpp for how layers, weights and models fit together). Each
// factory returns a new layer; applying it to a layer_output records the application. Names are
// Keras' ("dense", "conv2d_1", ...) unless given. Images are NHWC; filters HWIO.
//
//   auto x = af::nn::input({28, 28, 1});
//   x = af::nn::conv2d(32, {3, 3}, {.activation = "relu"})(x);
//   x = af::nn::max_pool2d()(x);
//   x = af::nn::dropout(0.25)(af::nn::flatten()(x));
//   auto logits = af::nn::dense(10)(x);

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/train/layer.hpp"

namespace af::nn {

// -- core --------------------------------------------------------------------------------------------

struct dense_options {
  std::string activation;  ///< "" (linear), "relu", "sigmoid", "tanh", "gelu", "softmax"
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
/// x @ kernel + bias over the last axis: [..., in] -> [..., units].
layer_ptr dense(int64_t units, dense_options options = {});

/// One of the activations above as a layer.
layer_ptr activation(std::string name_of_activation, std::string name = {});
/// [d1, d2, ...] -> [d1 * d2 * ...] per sample.
layer_ptr flatten(std::string name = {});
/// Per-sample dims to `target` (one entry may be -1); the element count must agree.
layer_ptr reshape(std::vector<int64_t> target, std::string name = {});
/// While training, zeroes each element with probability `rate` and scales the rest by
/// 1 / (1 - rate), with a new mask every step; the identity otherwise.
layer_ptr dropout(double rate, std::string name = {});
/// Elementwise sum of inputs of one shape (functional models).
layer_ptr add(std::string name = {});
/// Inputs joined along `axis` of the per-sample dims (-1: the last).
layer_ptr concatenate(int64_t axis = -1, std::string name = {});

// -- convolution and pooling -------------------------------------------------------------------------

struct conv_options {
  std::array<int64_t, 2> strides{1, 1};
  padding_mode padding = padding_mode::valid;
  std::array<int64_t, 2> dilations{1, 1};
  std::string activation;
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
/// [H, W, Cin] -> [OH, OW, filters] with a [KH, KW, Cin, filters] kernel.
layer_ptr conv2d(int64_t filters, std::array<int64_t, 2> kernel_size, conv_options options = {});

struct depthwise_options {
  int64_t depth_multiplier = 1;
  std::array<int64_t, 2> strides{1, 1};
  padding_mode padding = padding_mode::valid;
  std::array<int64_t, 2> dilations{1, 1};
  std::string activation;
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string name;
};
/// Each input channel convolved with its own depth_multiplier filters: [H, W, C] -> [OH, OW, C*m],
/// kernel [KH, KW, C, m] as Keras stores it.
layer_ptr depthwise_conv2d(std::array<int64_t, 2> kernel_size, depthwise_options options = {});

struct separable_options {
  int64_t depth_multiplier = 1;
  std::array<int64_t, 2> strides{1, 1};
  padding_mode padding = padding_mode::valid;
  std::array<int64_t, 2> dilations{1, 1};
  std::string activation;
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string pointwise_initializer = "glorot_uniform";
  std::string name;
};
/// A depthwise convolution followed by a 1x1 convolution to `filters` channels (one bias, after).
layer_ptr separable_conv2d(int64_t filters, std::array<int64_t, 2> kernel_size, separable_options options = {});

struct pooling_options {
  std::array<int64_t, 2> pool_size{2, 2};
  std::array<int64_t, 2> strides{0, 0};  ///< {0, 0}: the pool size
  padding_mode padding = padding_mode::valid;
  std::string name;
};
layer_ptr max_pool2d(pooling_options options = {});
layer_ptr avg_pool2d(pooling_options options = {});
/// [H, W, C] -> [C]: the mean over the spatial axes.
layer_ptr global_average_pooling2d(std::string name = {});

// -- normalization -----------------------------------------------------------------------------------

struct batch_norm_options {
  double momentum = 0.99;  ///< moving = moving * momentum + batch * (1 - momentum)
  double epsilon = 1e-3;
  bool center = true;      ///< beta
  bool scale = true;       ///< gamma
  std::string name;
};
/// Normalises over every axis but the last (channels) with the batch's statistics while training
/// (updating the moving mean and variance, non-trainable weights) and the moving ones otherwise.
layer_ptr batch_normalization(batch_norm_options options = {});

struct layer_norm_options {
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  std::string name;
};
/// Normalises each sample over its last axis; gamma and beta have the last axis' size.
layer_ptr layer_normalization(layer_norm_options options = {});

// -- sequences ---------------------------------------------------------------------------------------

struct embedding_options {
  std::string embeddings_initializer = "uniform";  ///< Keras' default: uniform in [-0.05, 0.05]
  std::string name;
};
/// Integer ids [T] (i32 or i64) -> vectors [T, output_dim] from an [input_dim, output_dim] table.
/// An id outside [0, input_dim) fails the gather with an error naming it.
layer_ptr embedding(int64_t input_dim, int64_t output_dim, embedding_options options = {});

struct recurrent_options {
  bool return_sequences = false;  ///< [T, units] instead of the last step's [units]
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "glorot_uniform";
  bool unit_forget_bias = true;  ///< LSTM: forget-gate bias starts at 1
  bool reset_after = true;       ///< GRU: Keras' default (cuDNN-compatible) variant
  std::string name;
};
/// [T, features] -> [units] (or [T, units]); gates i, f, c, o in Keras' weight layout
/// (kernel [features, 4*units], recurrent_kernel [units, 4*units], bias [4*units]). The time loop
/// is unrolled in the traced graph.
layer_ptr lstm(int64_t units, recurrent_options options = {});
/// Gates z, r, h in Keras' layout; with reset_after the bias is [2, 3*units] (input and recurrent).
layer_ptr gru(int64_t units, recurrent_options options = {});

}  // namespace af::nn
