#include "coordinator/server.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/crypto.h"
#include "common/files.h"
#include "coordinator/certificates.h"
#include "coordinator/tcp_listener.h"
#include "ledger/note.h"

namespace claw {

Result<std::string> LoadCoordinatorKey(const std::string& data_dir, bool create, Logger log) {
  std::string path = data_dir + "/coordinator.key";
  if (std::ifstream f(path); f) {
    std::string hex;
    std::getline(f, hex);
    auto key = FromHex(hex);
    if (!key.ok() || key->size() != 64) {
      return InvalidArgument(path + ": not a coordinator key (64 bytes, hex)");
    }
    return std::move(key).value();
  }
  if (!create) return NotFound("no coordinator key in " + data_dir + "; run `claw coordinator init`");
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  KeyPair kp = GenerateSigningKey();
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(path, ToHex(kp.secret_key) + "\n", 0600));
  log->info("created coordinator key {} (public {})", path, ToHex(kp.public_key));
  return kp.secret_key;
}

Result<std::string> LoadLedgerKey(const std::string& data_dir, Logger log) {
  const std::string path = data_dir + "/ledger.key";
  if (std::ifstream f(path); f) {
    std::string key;
    std::getline(f, key);
    auto signer = ledger::ParseSignerKey(key);
    if (!signer.ok()) return InvalidArgument(path + ": " + signer.status().message());
    return key;
  }
  // The origin names this log and no other (C2SP tlog-checkpoint).
  const std::string origin = "openclaw-compute/ledger-" + RandomHex(6);
  auto key = ledger::FormatSignerKey(origin, GenerateSigningKey().secret_key);
  if (!key.ok()) return key.status();
  auto signer = ledger::ParseSignerKey(*key);
  if (!signer.ok()) return signer.status();
  auto vkey = ledger::FormatVerifierKey(origin, signer->secret_key.substr(32));
  if (!vkey.ok()) return vkey.status();
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(path, *key + "\n", 0600));
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(data_dir + "/ledger.pub", *vkey + "\n", 0644));
  log->info("created ledger key {} (verifier key {})", path, *vkey);
  return key;
}

Result<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(ServerOptions options,
                                                                    const AppRegistry* apps,
                                                                    Logger log) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = std::move(options);
  s->log_ = log;
  std::error_code ec;
  std::filesystem::create_directories(s->options_.data_dir, ec);
  if (ec) return Unavailable("cannot create data dir " + s->options_.data_dir + ": " + ec.message());

  if (s->options_.coordinator.signing_key.empty()) {
    auto key = LoadCoordinatorKey(s->options_.data_dir, true, log);
    if (!key.ok()) return key.status();
    s->options_.coordinator.signing_key = std::move(key).value();
  }
  if (s->options_.coordinator.ledger_key.empty()) {
    auto key = LoadLedgerKey(s->options_.data_dir, log);
    if (!key.ok()) return key.status();
    s->options_.coordinator.ledger_key = std::move(key).value();
  }
  s->blobs_ = std::make_unique<BlobDir>(s->options_.data_dir + "/blobs");
  CLAW_RETURN_IF_ERROR(s->blobs_->Init());
  s->options_.coordinator.blobs = s->blobs_.get();
  auto store = OpenSqliteStore(s->options_.data_dir + "/claw.db", s->options_.sqlite);
  if (!store.ok()) return store.status();
  s->store_ = std::move(store).value();
  auto coordinator = Coordinator::Create(s->store_.get(), apps, SystemClock::Get(),
                                         s->options_.coordinator, log);
  if (!coordinator.ok()) return coordinator.status();
  s->coordinator_ = std::move(coordinator).value();

  if (s->options_.enroll_tokens > 0) {
    auto tokens =
        s->coordinator_->CreateEnrollTokens(s->options_.enroll_tokens, s->options_.enroll_token_ttl);
    if (!tokens.ok()) return tokens.status();
    s->tokens_ = std::move(tokens).value();
    // The file keeps the tokens of earlier starts that can still enroll an
    // agent, then the new ones: a restart does not lose unused tokens.
    const std::string path = s->options_.data_dir + "/enroll-tokens";
    std::string text;
    size_t kept = 0;
    std::ifstream old(path);
    for (std::string line; std::getline(old, line);) {
      if (!line.empty() && s->coordinator_->EnrollTokenUsable(line)) {
        text += line + "\n";
        ++kept;
      }
    }
    for (const auto& t : s->tokens_) text += t + "\n";
    CLAW_RETURN_IF_ERROR(WriteFileAtomically(path, text, 0600));
    log->info("enrollment tokens in {}: {} new, {} unused from before", path, s->tokens_.size(),
              kept);
  }

  if (s->options_.insecure_local) {
    for (const std::string& host : {s->options_.grpc_host, s->options_.http_host}) {
      if (host != "127.0.0.1" && host != "localhost" && host != "::1") {
        return InvalidArgument("--insecure-local serves only on a loopback address, not " + host);
      }
    }
    log->warn("insecure-local: client calls need no API token");
  } else {
    std::string path = s->options_.data_dir + "/admin-token";
    if (!std::filesystem::exists(path)) {
      auto token = s->coordinator_->AddUser("admin", kAdminTier);
      if (token.ok()) {
        CLAW_RETURN_IF_ERROR(WriteFileAtomically(path, *token + "\n", 0600));
        log->info("created the admin API token in {}", path);
      } else {
        log->warn("{} is missing and the admin user exists: {}", path, token.status().message());
      }
    }
  }
  s->agent_service_ = std::make_unique<AgentServiceImpl>(s->coordinator_.get());
  s->client_service_ =
      std::make_unique<ClientServiceImpl>(s->coordinator_.get(), s->options_.insecure_local);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  std::string cert_pem, key_pem;  // for the HTTP API too
  if (!s->options_.insecure_local) {
    auto tls = LoadOrCreateTls(s->options_.data_dir, s->options_.tls_names, true, log);
    if (!tls.ok()) return tls.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({tls->server_key_pem, tls->server_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
    cert_pem = tls->server_cert_pem;
    key_pem = tls->server_key_pem;
    s->tls_ = true;
  }
  // Our own listener hands connections to gRPC (tcp_listener.h says why).
  uint64_t descriptors = RaiseDescriptorLimit();
  TcpListener::Options lo;
  lo.host = s->options_.grpc_host;
  lo.port = s->options_.grpc_port;
  lo.max_per_address = s->options_.max_connections_per_address;
  auto listener = TcpListener::Listen(lo, log);
  if (!listener.ok()) return listener.status();
  s->listener_ = std::move(listener).value();
  s->grpc_port_ = s->listener_->port();
  log->info("file descriptors: {} (each agent holds one; see docs/operations.md)", descriptors);
  grpc::ServerBuilder builder;
  s->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  // A connection that completes no TLS handshake and sends no HTTP/2
  // SETTINGS in this time is closed; one with no call for the idle time too
  // (agents' sessions are calls, and keepalive pings find dead ones).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(s->options_.handshake_timeout.count() / 1000));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 5 * 60 * 1000);
  builder.SetMaxReceiveMessageSize(s->options_.max_message_bytes);
  builder.SetMaxSendMessageSize(s->options_.max_message_bytes);
  // Keepalive pings find agents that vanished without closing their stream.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.RegisterService(s->agent_service_.get());
  builder.RegisterService(s->client_service_.get());
  s->blob_service_ =
      std::make_unique<BlobServiceImpl>(s->coordinator_.get(), s->options_.insecure_local);
  builder.RegisterService(s->blob_service_.get());
  s->grpc_ = builder.BuildAndStart();
  if (!s->grpc_) return Unavailable("cannot start the gRPC server");
  s->listener_->Start(s->acceptor_.get());

  if (s->options_.http_port >= 0) {
    HttpApi::Options ho;
    ho.host = s->options_.http_host;
    ho.port = s->options_.http_port;
    ho.cert_pem = cert_pem;
    ho.key_pem = key_pem;
    ho.insecure_local = s->options_.insecure_local;
    ho.max_per_address = static_cast<unsigned>(s->options_.max_connections_per_address);
    ho.header_deadline = std::chrono::duration_cast<std::chrono::seconds>(s->options_.handshake_timeout);
    if (ho.header_deadline.count() < 1) ho.header_deadline = std::chrono::seconds(1);
    ho.dashboard = s->options_.dashboard;
    auto http = HttpApi::Start(s->coordinator_.get(), ho, log);
    if (!http.ok()) return http.status();
    s->http_ = std::move(http).value();
    s->http_port_ = s->http_->port();
  }
  CLAW_RETURN_IF_ERROR(s->WriteInfoFile());
  s->ticker_ = std::thread([srv = s.get()] { srv->TickLoop(); });
  log->info("coordinator listening grpc={} http={} data={}", s->grpc_target(), s->http_url(),
            s->options_.data_dir);
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

std::string CoordinatorServer::grpc_target() const {
  return options_.grpc_host + ":" + std::to_string(grpc_port_);
}

std::string CoordinatorServer::http_url() const {
  if (http_port_ < 0) return "";
  return (tls_ ? "https://" : "http://") + options_.http_host + ":" + std::to_string(http_port_);
}

Status CoordinatorServer::WriteInfoFile() const {
  nlohmann::json info = {{"grpc", grpc_target()}, {"http", http_url()}, {"pid", getpid()}};
  return WriteFileAtomically(options_.data_dir + "/coordinator.json", info.dump() + "\n", 0644);
}

void CoordinatorServer::Shutdown() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (http_) http_->Stop();
  if (listener_) listener_->Stop();  // before gRPC: it must not be handed connections after
  // Ends open streams promptly instead of waiting for agents to hang up.
  if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  std::error_code ec;
  std::filesystem::remove(options_.data_dir + "/coordinator.json", ec);
}

void CoordinatorServer::TickLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    coordinator_->Tick();
    lock.lock();
    auto until = std::chrono::steady_clock::now() + options_.tick;
    while (!stopping_ && cv_.wait_until(lock, until) == std::cv_status::no_timeout) {
    }
  }
}

void CoordinatorServer::Wait() {
  MutexLock lock(mu_);
  while (!stopping_) cv_.wait(lock);
}

}  // namespace claw
