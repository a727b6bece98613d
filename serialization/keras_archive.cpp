// A .keras archive: its zip members (libzip) and the datasets of its weights file (libhdf5, from
// an in-memory file image, so nothing is extracted to disk).

#include "serialization/keras_archive.hpp"

#include <hdf5.h>
#include <zip.h>

#include <memory>
#include <optional>
#include <vector>

namespace af::keras {

namespace {

constexpr zip_uint64_t max_member_bytes = zip_uint64_t{8} << 30;  // a weights file of 8 GiB at most

error bad(const std::string& path, const std::string& what) {
  return make_error(errc::malformed_input, "Keras archive '" + path + "': " + what);
}

expected<std::string> read_member(zip_t* zip, const std::string& path, const char* name) {
  const zip_int64_t index = zip_name_locate(zip, name, 0);
  if (index < 0) return bad(path, std::string{"no member '"} + name + "' (is this a Keras 3 .keras file?)");
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip, static_cast<zip_uint64_t>(index), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    return bad(path, std::string{"cannot stat member '"} + name + "'");
  if (st.size > max_member_bytes) return bad(path, std::string{"member '"} + name + "' is larger than 8 GiB");
  std::unique_ptr<zip_file_t, decltype(&zip_fclose)> file{zip_fopen_index(zip, static_cast<zip_uint64_t>(index), 0), zip_fclose};
  if (!file) return bad(path, std::string{"cannot open member '"} + name + "': " + zip_strerror(zip));
  std::string bytes(static_cast<std::size_t>(st.size), '\0');
  zip_uint64_t done = 0;
  while (done < st.size) {
    const zip_int64_t n = zip_fread(file.get(), bytes.data() + done, st.size - done);
    if (n < 0) return bad(path, std::string{"member '"} + name + "' is damaged: " + zip_file_strerror(file.get()));
    if (n == 0) return bad(path, std::string{"member '"} + name + "' ends early");
    done += static_cast<zip_uint64_t>(n);
  }
  return bytes;  // libzip checked the member's CRC-32 at its end
}

// What the HDF5 visit collects; errors stop it.
struct visit_state {
  std::string path;
  std::map<std::string, tensor> variables;
  std::optional<error> failure;
};

expected<tensor> read_dataset(hid_t file, const char* name, const std::string& path) {
  const std::string where = std::string{"weights dataset '"} + name + "'";
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  if (set < 0) return bad(path, "cannot open " + where);
  const hid_t space = H5Dget_space(set);
  const hid_t type = H5Dget_type(set);
  auto close = [&] {
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Dclose(set);
  };
  const H5T_class_t kind = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
  const int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  if ((kind != H5T_FLOAT && kind != H5T_INTEGER) || rank < 0 || rank > 8) {
    close();
    return bad(path, where + " is not a numeric array of at most 8 dimensions");
  }
  hsize_t dims[8] = {};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  shape s;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] > (hsize_t{1} << 40) || (dims[i] && count > (uint64_t{1} << 40) / dims[i])) {
      close();
      return bad(path, where + " is too large");
    }
    count *= dims[i];
    s.push_back(static_cast<int64_t>(dims[i]));
  }
  auto t = tensor::empty(s, dtype::f32);
  if (!t) {
    close();
    return t.error_value();
  }
  // HDF5 converts whatever the file stores (f16, f64, integers) to native floats.
  const herr_t read = count ? H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->raw_data()) : 0;
  close();
  if (read < 0) return bad(path, "cannot read " + where);
  return t;
}

herr_t visit_object(hid_t file, const char* name, const H5O_info_t* info, void* data) {
  auto& state = *static_cast<visit_state*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  auto t = read_dataset(file, name, state.path);
  if (!t) {
    state.failure = t.error_value();
    return -1;
  }
  state.variables.emplace(name, std::move(*t));
  return 0;
}

expected<std::map<std::string, tensor>> read_weights(std::string& image, const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back as values, not printed
  if (image.size() < 8 || image.compare(0, 8, "\x89HDF\r\n\x1a\n") != 0)
    return bad(path, "model.weights.h5 is not an HDF5 file");
  const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(access, 1 << 20, 0);
  H5Pset_file_image(access, image.data(), image.size());
  // Closing the file closes whatever a failed traversal of a damaged file left open inside HDF5.
  H5Pset_fclose_degree(access, H5F_CLOSE_STRONG);
  const hid_t file = H5Fopen("model.weights.h5", H5F_ACC_RDONLY, access);
  H5Pclose(access);
  if (file < 0) return bad(path, "model.weights.h5 is damaged (HDF5 cannot open it)");
  visit_state state{path, {}, std::nullopt};
  const herr_t visited = H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit_object, &state, H5O_INFO_BASIC);
  H5Fclose(file);
  if (state.failure) return *state.failure;
  if (visited < 0) return bad(path, "model.weights.h5 is damaged (its objects cannot be listed)");
  return std::move(state.variables);
}

}  // namespace

expected<archive> read_archive(const std::string& path) {
  int code = 0;
  std::unique_ptr<zip_t, decltype(&zip_discard)> zip{zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code), zip_discard};
  if (!zip) {
    zip_error_t err;
    zip_error_init_with_code(&err, code);
    const std::string why = zip_error_strerror(&err);
    zip_error_fini(&err);
    if (code == ZIP_ER_NOENT || code == ZIP_ER_OPEN || code == ZIP_ER_READ)
      return make_error(errc::io_error, "Keras archive '" + path + "': " + why);
    return bad(path, "not a readable zip archive: " + why);
  }
  archive out;
  AF_TRY_ASSIGN(out.config_json, read_member(zip.get(), path, "config.json"));
  if (zip_name_locate(zip.get(), "metadata.json", 0) >= 0) {
    AF_TRY_ASSIGN(out.metadata_json, read_member(zip.get(), path, "metadata.json"));
  }
  AF_TRY_ASSIGN(auto image, read_member(zip.get(), path, "model.weights.h5"));
  AF_TRY_ASSIGN(out.variables, read_weights(image, path));
  return out;
}

}  // namespace af::keras
