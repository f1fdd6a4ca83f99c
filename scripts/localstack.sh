# Sourced by scripts/test.sh: LocalStack in host mode (no Docker), installed on first use
# into .local/localstack and started on a loopback port.
#
# LocalStack's DynamoDB is AWS's DynamoDB Local (Java), so conditional writes and
# transactions behave as on AWS; moto's do not under concurrency (see Serialized in
# tests/src/lib.rs). Everything LocalStack would download at start (DynamoDB Local, a Java
# runtime, a -javaagent jar, a TLS certificate) is put in place here from the package
# registries and the machine, because nothing else can be downloaded on CI.
#
# Needs: Python 3.13 (localstack-core 2026.3.0 imports warnings.deprecated, new in 3.13,
# though its metadata says 3.10), a Java 17+ JDK (java runs DynamoDB Local, javac builds the
# stand-in agent), npm (DynamoDB Local's jars come from the npm package
# amplify-dynamodb-simulator), openssl, curl.

LOCALSTACK_VERSION="2026.3.0"
# The npm package that ships DynamoDB Local's jar and libs in its `emulator` folder.
DDB_SIMULATOR_VERSION="2.9.30"
LS_HOME="$ROOT/.local/localstack"
LS_VENV="$LS_HOME/venv"
# LocalStack's FILESYSTEM_ROOT: its var/lib, cache and tmp folders live under it.
LS_ROOT="$LS_HOME/root"
# Written last by ensure_localstack: the versions installed. A different content reinstalls.
LS_STAMP="$LS_HOME/installed"

# Prints a Python 3.13 interpreter: $LOCALSTACK_PYTHON, python3.13 on PATH, or pyenv's.
ls_find_python() {
  local c pyenv_root
  pyenv_root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for c in "${LOCALSTACK_PYTHON:-}" python3.13 "$pyenv_root"/versions/3.13*/bin/python3.13; do
    [ -n "$c" ] || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

# Prints the home of a Java 17+ JDK ($JAVA_HOME, else the `java` on PATH).
ls_find_java_home() {
  local java="java" home major
  [ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
  command -v "$java" >/dev/null 2>&1 || return 1
  home="$("$java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.home = //p')"
  major="$("$java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')"
  [ -n "$home" ] && [ "${major%%.*}" -ge 17 ] 2>/dev/null && [ -x "$home/bin/javac" ] || return 1
  echo "$home"
}

ls_missing() {
  echo "make test runs the suite on LocalStack, which needs $1." >&2
  echo "Install it, or run the suite on moto instead: EMULATOR=moto make test" >&2
  return 1
}

# ensure_localstack: installs LocalStack and its DynamoDB Local into .local/localstack when
# missing (about 1-2 minutes: PyPI and npm downloads), and sets LS_JAVA_HOME.
ensure_localstack() {
  local py
  py="$(ls_find_python)" || {
    ls_missing "Python 3.13 (localstack-core $LOCALSTACK_VERSION imports warnings.deprecated): e.g. \`pyenv install 3.13\`, or the python3.13 package of your distribution; or point LOCALSTACK_PYTHON at one"
    return 1
  }
  LS_JAVA_HOME="$(ls_find_java_home)" || {
    ls_missing "a Java 17+ JDK (java runs DynamoDB Local, javac builds a stand-in agent): e.g. \`apt-get install openjdk-17-jdk-headless\`, or set JAVA_HOME"
    return 1
  }
  command -v npm >/dev/null 2>&1 || {
    ls_missing "npm (DynamoDB Local's jars come from the npm package amplify-dynamodb-simulator): e.g. \`apt-get install npm\`"
    return 1
  }
  command -v openssl >/dev/null 2>&1 || { ls_missing "openssl"; return 1; }
  local want="localstack-core $LOCALSTACK_VERSION, amplify-dynamodb-simulator $DDB_SIMULATOR_VERSION, java $LS_JAVA_HOME"
  if [ -f "$LS_STAMP" ] && [ "$(cat "$LS_STAMP")" = "$want" ]; then
    return 0
  fi
  echo "installing LocalStack ($want) into $LS_HOME" >&2
  rm -rf "$LS_HOME"
  mkdir -p "$LS_HOME"
  "$py" -m venv "$LS_VENV"
  # cbor2 6 breaks localstack-core's serializers; service_identity is imported by the
  # runtime extra's TLS stack but not declared.
  "$LS_VENV/bin/pip" install -q --disable-pip-version-check \
    "localstack-core[runtime]==$LOCALSTACK_VERSION" service_identity "cbor2<6"

  # Where LocalStack's packages look (its dynamodb/packages.py and packages/java.py):
  # <var_libs>/dynamodb-local/2/DynamoDBLocal.jar marks DynamoDB Local installed, and
  # <var_libs>/java/21/bin/java the Java it runs it with.
  local var_libs="$LS_ROOT/var/lib/localstack/lib" cache="$LS_ROOT/var/lib/localstack/cache"
  local ddb="$var_libs/dynamodb-local/2"
  mkdir -p "$ddb" "$var_libs/java" "$cache" "$LS_HOME/npm"
  (cd "$LS_HOME/npm" && npm pack -q "amplify-dynamodb-simulator@$DDB_SIMULATOR_VERSION" >/dev/null)
  tar -xzf "$LS_HOME/npm/amplify-dynamodb-simulator-$DDB_SIMULATOR_VERSION.tgz" -C "$LS_HOME/npm"
  cp -r "$LS_HOME/npm/package/emulator/." "$ddb/"
  rm -rf "$LS_HOME/npm"
  # DynamoDB Local 2+ needs Java 17+; LocalStack would download a Java 21.
  ln -sfn "$LS_JAVA_HOME" "$var_libs/java/21"
  # LocalStack starts DynamoDB Local with -javaagent:ddb-local-loader-0.1.jar, an agent that
  # only lifts the limit of 20 global secondary indexes per table (our tables have fewer).
  # It cannot be downloaded here, so a do-nothing agent stands in for it.
  local agent="$LS_HOME/agent"
  mkdir -p "$agent"
  printf 'public class NoopAgent { public static void premain(String args) {} }\n' >"$agent/NoopAgent.java"
  printf 'Premain-Class: NoopAgent\n' >"$agent/manifest.txt"
  "$LS_JAVA_HOME/bin/javac" -d "$agent" "$agent/NoopAgent.java"
  "$LS_JAVA_HOME/bin/jar" cfm "$ddb/ddb-local-loader-0.1.jar" "$agent/manifest.txt" -C "$agent" NoopAgent.class
  rm -rf "$agent"
  # LocalStack's TLS certificate (key and certificate in one PEM) where it caches the one it
  # downloads; SKIP_SSL_CERT_DOWNLOAD=1 keeps it from trying, and the pyOpenSSL it installs
  # cannot generate one.
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=localhost.localstack.cloud" \
    -keyout "$cache/server.test.key" -out "$cache/server.test.crt" 2>/dev/null
  cat "$cache/server.test.key" "$cache/server.test.crt" >"$cache/server.test.pem"
  echo "$want" >"$LS_STAMP"
}

# start_localstack PORT LOGFILE: starts LocalStack (SQS, DynamoDB, SNS, Secrets Manager) on 127.0.0.1:PORT in
# the background, sets LOCALSTACK_PID, and returns once a first DynamoDB and SQS call has
# been answered (the first one starts DynamoDB Local: tens of seconds on a busy machine).
start_localstack() {
  local port="$1" log="$2"
  # Each run gets its own FILESYSTEM_ROOT (state, tmp, logs) that shares the installation.
  LS_RUN_ROOT="$LS_HOME/run-$port"
  rm -rf "$LS_RUN_ROOT"
  mkdir -p "$LS_RUN_ROOT/var/lib/localstack"
  ln -s "$LS_ROOT/var/lib/localstack/lib" "$LS_RUN_ROOT/var/lib/localstack/lib"
  ln -s "$LS_ROOT/var/lib/localstack/cache" "$LS_RUN_ROOT/var/lib/localstack/cache"
  env OVERRIDE_IN_DOCKER=0 FILESYSTEM_ROOT="$LS_RUN_ROOT" \
    GATEWAY_SERVER=hypercorn GATEWAY_LISTEN="127.0.0.1:$port" \
    SERVICES=sqs,dynamodb,sns,secretsmanager,events EAGER_SERVICE_LOADING=1 DYNAMODB_IN_MEMORY=1 \
    DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 DNS_ADDRESS=0 \
    PATH="$LS_JAVA_HOME/bin:$PATH" \
    "$LS_VENV/bin/python" -m localstack.runtime.main >"$log" 2>&1 &
  LOCALSTACK_PID=$!
  local url="http://127.0.0.1:$port" i
  for i in $(seq 1 1200); do
    if curl -fsS -o /dev/null "$url/_localstack/health" 2>/dev/null; then
      break
    fi
    if ! kill -0 "$LOCALSTACK_PID" 2>/dev/null; then
      echo "LocalStack exited; its log ($log):" >&2; tail -50 "$log" >&2; return 1
    fi
    sleep 0.1
  done
  # Warm up: the first DynamoDB call waits for DynamoDB Local's JVM.
  local body='{}'
  for i in $(seq 1 180); do
    if curl -fsS -o /dev/null -X POST "$url/" \
        -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        -d "$body" 2>/dev/null &&
      curl -fsS -o /dev/null "$url/?Action=ListQueues" \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0' 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$LOCALSTACK_PID" 2>/dev/null; then
      echo "LocalStack exited; its log ($log):" >&2; tail -50 "$log" >&2; return 1
    fi
    sleep 1
  done
  echo "LocalStack did not answer DynamoDB and SQS calls on $url; its log: $log" >&2
  return 1
}

# stop_localstack: stops the LocalStack started above and its DynamoDB Local (a child in its
# own session, which LocalStack stops on SIGTERM; killed here if LocalStack did not).
stop_localstack() {
  [ -n "${LOCALSTACK_PID:-}" ] || return 0
  local children i
  children="$(pgrep -P "$LOCALSTACK_PID" || true)"
  kill -TERM "$LOCALSTACK_PID" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$LOCALSTACK_PID" 2>/dev/null || break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL "$LOCALSTACK_PID" $children 2>/dev/null || true
  rm -rf "$LS_RUN_ROOT"
  LOCALSTACK_PID=""
}
