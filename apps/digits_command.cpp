// `actorflow digits [--csv PATH] [--out DIR] [--test-fraction F] [--seed N]`: turns scikit-learn's
// 8x8 handwritten digits (digits.csv.gz from Debian's python3-sklearn) into DIR/train.tfrecord and
// DIR/test.tfrecord of tf.train.Example ("image": 64 floats in [0,1], "label": one int64), offline.

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "apps/commands.hpp"
#include "serialization/digits.hpp"

namespace af::apps {

namespace {

int digits_usage(FILE* out) {
  std::fprintf(out,
               "usage: actorflow digits [--csv PATH] [--out DIR] [--test-fraction F] [--seed N]\n"
               "  --csv PATH          digits.csv.gz to read (default: the one python3-sklearn installs)\n"
               "  --out DIR           where train.tfrecord and test.tfrecord go (default data/digits)\n"
               "  --test-fraction F   share of images in test.tfrecord, 0..1 (default 0.2, rounded to nearest)\n"
               "  --seed N            shuffle seed, the same split on every machine (default 42)\n");
  return out == stderr ? 2 : 0;
}

struct digits_args {
  std::optional<std::string> csv;
  std::string out_dir = "data/digits";
  digits::split_options split;
};

template <class T>
bool parse_whole(std::string_view text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size() && !text.empty();
}

// Parses argv into `args`; returns an exit code when the command should stop (help or bad usage).
std::optional<int> parse_args(int argc, char** argv, digits_args& args) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") return digits_usage(stdout);
    std::string_view name = a;
    std::optional<std::string_view> value;
    if (auto eq = a.find('='); a.starts_with("--") && eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (name != "--csv" && name != "--out" && name != "--test-fraction" && name != "--seed") {
      std::fprintf(stderr, "actorflow digits: unknown argument '%s'\n", argv[i]);
      return digits_usage(stderr);
    }
    if (!value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "actorflow digits: %s needs a value\n", argv[i]);
        return digits_usage(stderr);
      }
      value = argv[++i];
    }
    if (name == "--csv") {
      args.csv = std::string{*value};
    } else if (name == "--out") {
      args.out_dir = std::string{*value};
    } else if (name == "--test-fraction") {
      double f = 0;
      if (!parse_whole(*value, f) || !(f >= 0 && f <= 1)) {
        std::fprintf(stderr, "actorflow digits: --test-fraction wants a number in 0..1, got '%.*s'\n",
                     static_cast<int>(value->size()), value->data());
        return 2;
      }
      args.split.test_fraction = f;
    } else {
      uint64_t seed = 0;
      if (!parse_whole(*value, seed)) {
        std::fprintf(stderr, "actorflow digits: --seed wants a non-negative integer, got '%.*s'\n",
                     static_cast<int>(value->size()), value->data());
        return 2;
      }
      args.split.seed = seed;
    }
  }
  return std::nullopt;
}

}  // namespace

int run_digits(int argc, char** argv) {
  digits_args args;
  if (auto stop = parse_args(argc, argv, args)) return *stop;
  std::string csv;
  if (args.csv) {
    csv = *args.csv;
  } else if (auto found = digits::find_sklearn_digits_csv()) {
    csv = *found;
  } else {
    std::fprintf(stderr,
                 "actorflow digits: scikit-learn's digits.csv.gz was not found (looked under "
                 "/usr/lib/python3/dist-packages and /usr/local/lib/python3*/dist-packages).\n"
                 "Install python3-sklearn (scripts/setup installs it: sudo apt-get install python3-sklearn) "
                 "or pass --csv PATH.\n");
    return 2;
  }

  auto data = digits::read_digits_csv(csv);
  if (!data) {
    std::fprintf(stderr, "actorflow digits: %s\n", data.error_value().to_string().c_str());
    return 1;
  }
  std::printf("read %lld images from %s\n", static_cast<long long>(data->labels.dim(0)), csv.c_str());

  auto counts = digits::write_digits_tfrecords(*data, args.out_dir, args.split);
  if (!counts) {
    std::fprintf(stderr, "actorflow digits: %s\n", counts.error_value().to_string().c_str());
    return 1;
  }
  std::printf("split with seed %llu, test fraction %g: %lld train, %lld test\n",
              static_cast<unsigned long long>(args.split.seed), args.split.test_fraction,
              static_cast<long long>(counts->train), static_cast<long long>(counts->test));
  std::printf("wrote %s/train.tfrecord (%lld records)\n", args.out_dir.c_str(),
              static_cast<long long>(counts->train));
  std::printf("wrote %s/test.tfrecord (%lld records)\n", args.out_dir.c_str(), static_cast<long long>(counts->test));
  return 0;
}

}  // namespace af::apps
