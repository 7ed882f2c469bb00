#include "coordinator/certificates.h"

#include "common/files.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace claw {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `subject_key`, signed by `issuer_key` (self-signed when
// `issuer` is null).
Cert MakeCertificate(const std::string& common_name, EVP_PKEY* subject_key, X509* issuer,
                     EVP_PKEY* issuer_key, const std::vector<std::pair<int, std::string>>& ext) {
  Cert cert(X509_new());
  if (!cert) return nullptr;
  uint64_t serial = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), subject_key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("OpenClaw Compute"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  for (const auto& [nid, value] : ext) {
    if (!AddExtension(cert.get(), signer, nid, value)) return nullptr;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return nullptr;
  return cert;
}

std::string ToPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string ToPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool IsIpAddress(const std::string& s) {
  return !s.empty() && (s.find(':') != std::string::npos ||
                        s.find_first_not_of("0123456789.") == std::string::npos);
}


Result<TlsMaterial> Make(const std::string& dir, const std::vector<std::string>& names) {
  Key ca_key(EVP_EC_gen("P-256")), server_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key) return Internal("cannot generate TLS keys");
  Cert ca = MakeCertificate("claw coordinator CA", ca_key.get(), nullptr, ca_key.get(),
                            {{NID_basic_constraints, "critical,CA:TRUE"},
                             {NID_key_usage, "critical,keyCertSign,cRLSign"},
                             {NID_subject_key_identifier, "hash"}});
  std::string san = "DNS:localhost,IP:127.0.0.1";
  for (const auto& n : names) san += (IsIpAddress(n) ? ",IP:" : ",DNS:") + n;
  Cert server = ca ? MakeCertificate("claw coordinator", server_key.get(), ca.get(), ca_key.get(),
                                     {{NID_basic_constraints, "critical,CA:FALSE"},
                                      {NID_key_usage, "critical,digitalSignature"},
                                      {NID_ext_key_usage, "serverAuth"},
                                      {NID_subject_alt_name, san}})
                   : nullptr;
  if (!ca || !server) return Internal("cannot make TLS certificates (names: " + san + ")");
  TlsMaterial m{ToPem(ca.get()), ToPem(server.get()), ToPem(server_key.get())};
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(dir + "/ca.key", ToPem(ca_key.get()), 0600));
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(dir + "/server.key", m.server_key_pem, 0600));
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(dir + "/server.pem", m.server_cert_pem, 0644));
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(dir + "/ca.pem", m.ca_pem, 0644));  // last: marks it done
  return m;
}

}  // namespace

Result<std::string> ReadPemFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f || ss.str().find("-----BEGIN") == std::string::npos) {
    return InvalidArgument(path + ": not a readable PEM file");
  }
  return ss.str();
}

Result<TlsMaterial> LoadOrCreateTls(const std::string& data_dir,
                                    const std::vector<std::string>& names, bool create,
                                    Logger log) {
  if (std::filesystem::exists(data_dir + "/ca.pem")) {
    TlsMaterial m;
    auto ca = ReadPemFile(data_dir + "/ca.pem");
    auto cert = ReadPemFile(data_dir + "/server.pem");
    auto key = ReadPemFile(data_dir + "/server.key");
    for (const auto* r : {&ca, &cert, &key}) {
      if (!r->ok()) return r->status();
    }
    return TlsMaterial{*ca, *cert, *key};
  }
  if (!create) return NotFound("no TLS material in " + data_dir + "; run `claw coordinator init`");
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  auto m = Make(data_dir, names);
  if (m.ok()) log->info("created a CA and server certificate in {} (agents and clients pin {}/ca.pem)", data_dir, data_dir);
  return m;
}

}  // namespace claw
