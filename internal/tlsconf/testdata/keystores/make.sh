#!/usr/bin/env bash
# Makes the Java keystores in this directory the way Flume users make theirs.
# Flume's User Guide defers to Kafka's security documentation ("Encryption
# and Authentication using SSL") for making keystores; these are its steps,
# with -storetype JKS spelled out (the JDK 8 that Flume runs on made JKS by
# default; JDK 9+ makes PKCS12 unless told) and a subjectAltName, which Go
# clients require to verify a host. Run it with Debian's JDK
# (openjdk-17-jre-headless) and openssl:
#
#   internal/tlsconf/testdata/keystores/make.sh [DIR]   # default: this directory
#
# The tests use the committed output (a keytool call costs a JVM start, 1-3 s
# each, about a minute for the whole set on the CI machine);
# TestKeytoolStoresAsMade (SLUICE_KEYTOOL=1) runs this script into a temp dir
# and checks the fresh stores the same way.
set -euo pipefail
out=${1:-$(dirname "$0")}
cd "$out"
rm -f -- *.jks *.jceks *.p12 ca-cert ca-key ca-cert.srl cert-file cert-signed client-cert-file client-cert-signed
days=3650
kt() { keytool -noprompt "$@" 2>/dev/null; }

# 1. The certificate authority (Kafka docs: openssl req -new -x509 -keyout ca-key -out ca-cert -days 365).
openssl req -new -x509 -keyout ca-key -out ca-cert -days $days -subj "/CN=sluice-test-ca" -passout pass:capass 2>/dev/null

# 2. Every client's and server's truststore trusts the CA
#    (keytool -keystore client.truststore.jks -alias CARoot -import -file ca-cert).
kt -keystore client.truststore.jks -storetype JKS -storepass trustpass -alias CARoot -import -file ca-cert
kt -keystore server.truststore.jks -storetype JKS -storepass trustpass -alias CARoot -import -file ca-cert

# 3. The server's key (keytool -keystore server.keystore.jks -alias localhost -validity 365 -genkey -keyalg RSA),
#    signed by the CA, with the CA and the signed certificate imported back.
kt -keystore server.keystore.jks -storetype JKS -storepass serverpass -keypass serverpass -alias localhost \
  -validity $days -genkey -keyalg RSA -keysize 2048 -dname "CN=localhost" -ext "SAN=DNS:localhost,IP:127.0.0.1"
kt -keystore server.keystore.jks -storepass serverpass -alias localhost -certreq -file cert-file -ext "SAN=DNS:localhost,IP:127.0.0.1"
openssl x509 -req -CA ca-cert -CAkey ca-key -in cert-file -out cert-signed -days $days -CAcreateserial \
  -passin pass:capass -copy_extensions copyall 2>/dev/null
kt -keystore server.keystore.jks -storepass serverpass -alias CARoot -import -file ca-cert
kt -keystore server.keystore.jks -storepass serverpass -alias localhost -import -file cert-signed

# 4. A client's key for client authentication, with its own key password
#    (Kafka's ssl.key.password: "the password of the private key in the key store file").
kt -keystore client.keystore.jks -storetype JKS -storepass clientpass -keypass clientkeypass -alias client \
  -validity $days -genkey -keyalg RSA -keysize 2048 -dname "CN=flume-client"
kt -keystore client.keystore.jks -storepass clientpass -keypass clientkeypass -alias client -certreq -file client-cert-file
openssl x509 -req -CA ca-cert -CAkey ca-key -in client-cert-file -out client-cert-signed -days $days -CAcreateserial \
  -passin pass:capass 2>/dev/null
kt -keystore client.keystore.jks -storepass clientpass -alias CARoot -import -file ca-cert
kt -keystore client.keystore.jks -storepass clientpass -keypass clientkeypass -alias client -import -file client-cert-signed

# 4b. A sink's client key, protected by the store's password as Flume's
#     sinks (and Java's KeyManagerFactory) expect.
kt -keystore agent.keystore.jks -storetype JKS -storepass clientpass -keypass clientpass -alias agent \
  -validity $days -genkey -keyalg RSA -keysize 2048 -dname "CN=flume-agent"
kt -keystore agent.keystore.jks -storepass clientpass -alias agent -certreq -file client-cert-file
openssl x509 -req -CA ca-cert -CAkey ca-key -in client-cert-file -out client-cert-signed -days $days -CAcreateserial \
  -passin pass:capass 2>/dev/null
kt -keystore agent.keystore.jks -storepass clientpass -alias CARoot -import -file ca-cert
kt -keystore agent.keystore.jks -storepass clientpass -alias agent -import -file client-cert-signed

# 5. The same server key in the stores JDK 9+ keytool makes by default (PKCS12)
#    and in JCEKS (which sluice refuses with the command that converts it).
kt -importkeystore -srckeystore server.keystore.jks -srcstorepass serverpass -destkeystore server.keystore.p12 \
  -deststoretype PKCS12 -deststorepass serverpass
kt -importkeystore -srckeystore server.keystore.jks -srcstorepass serverpass -destkeystore server.keystore.jceks \
  -deststoretype JCEKS -deststorepass serverpass
kt -importkeystore -srckeystore server.truststore.jks -srcstorepass trustpass -destkeystore server.truststore.p12 \
  -deststoretype PKCS12 -deststorepass trustpass

# 6. Stores that must be refused: two keys and no alias chosen; a certificate
#    that expired (valid for one day, two days ago); a client key no CA signed.
kt -keystore two-keys.jks -storetype JKS -storepass serverpass -keypass serverpass -alias first \
  -genkey -keyalg EC -dname "CN=first" -validity $days
kt -keystore two-keys.jks -storetype JKS -storepass serverpass -keypass serverpass -alias second \
  -genkey -keyalg EC -dname "CN=second" -validity $days
kt -keystore expired.keystore.jks -storetype JKS -storepass serverpass -keypass serverpass -alias localhost \
  -genkey -keyalg EC -dname "CN=localhost" -startdate -2d -validity 1
kt -keystore stranger.keystore.jks -storetype JKS -storepass clientpass -keypass clientpass -alias stranger \
  -genkey -keyalg EC -dname "CN=stranger" -validity $days

rm -f ca-key ca-cert.srl cert-file cert-signed client-cert-file client-cert-signed
