package chrono.search;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * The users allowed to call the node's HTTP API, read from a file that {@code chrono services up}
 * writes (mode 0600, owned by the node's user) and read again when it changes.
 *
 * <p>One line per user: {@code USER:sha256:SALT_HEX:DIGEST_HEX}, where DIGEST is
 * SHA-256(SALT || UTF-8 password); {@code #} starts a comment. A fast hash is enough here: the
 * passwords {@code chrono services up} generates are 256-bit random strings, and the file is
 * readable only by root (who can read the clear-text credentials anyway) and the node's user.
 *
 * <p>Fails closed: a missing, unreadable or malformed file lets nobody in, and says why in the
 * node's log.
 */
final class UsersFile {

    private static final Logger LOG = LogManager.getLogger(UsersFile.class);
    private static final String SCHEME = "sha256";
    /** A changed file is noticed within this long (one stat per request at most this often). */
    static final long RECHECK_NANOS = 1_000_000_000L;

    /** One user's salt and digest. */
    record Entry(byte[] salt, byte[] digest) {}

    private final Path path;
    private volatile Map<String, Entry> users = Map.of();
    private volatile Object loadedVersion;
    private volatile long checkedAtNanos;

    UsersFile(Path path) {
        this.path = path;
        reload();
    }

    Path path() {
        return path;
    }

    /** Whether {@code user} with {@code password} is a user of the file (constant-time compare). */
    boolean verify(String user, String password) {
        refreshIfDue();
        Entry entry = users.get(user);
        if (entry == null) {
            return false;
        }
        return MessageDigest.isEqual(entry.digest(), digest(entry.salt(), password));
    }

    int size() {
        refreshIfDue();
        return users.size();
    }

    private void refreshIfDue() {
        long now = System.nanoTime();
        if (now - checkedAtNanos < RECHECK_NANOS) {
            return;
        }
        checkedAtNanos = now;
        Object version = version();
        if (version == null ? loadedVersion != null : !version.equals(loadedVersion)) {
            reload();
        }
    }

    /** The file's modification time and size, or null when it cannot be read. */
    private Object version() {
        try {
            BasicFileAttributes attributes = Files.readAttributes(path, BasicFileAttributes.class);
            return List.of(attributes.lastModifiedTime().toMillis(), attributes.size());
        } catch (IOException e) {
            return null;
        }
    }

    private synchronized void reload() {
        Object version = version();
        try {
            users = parse(Files.readAllLines(path, StandardCharsets.UTF_8));
            LOG.info("read {} user(s) from {}", users.size(), path);
        } catch (IOException | IllegalArgumentException e) {
            users = Map.of();
            LOG.error("no user may call the node: cannot use {}: {}", path, e.toString());
        }
        loadedVersion = version;
        checkedAtNanos = System.nanoTime();
    }

    static Map<String, Entry> parse(List<String> lines) {
        Map<String, Entry> parsed = new HashMap<>();
        HexFormat hex = HexFormat.of();
        for (int number = 1; number <= lines.size(); number++) {
            String line = lines.get(number - 1).strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String[] parts = line.split(":", -1);
            if (parts.length != 4 || parts[0].isEmpty() || !SCHEME.equals(parts[1])) {
                throw new IllegalArgumentException(
                    "line " + number + " is not USER:" + SCHEME + ":SALT_HEX:DIGEST_HEX"
                );
            }
            parsed.put(parts[0], new Entry(hex.parseHex(parts[2]), hex.parseHex(parts[3])));
        }
        return Map.copyOf(parsed);
    }

    static byte[] digest(byte[] salt, String password) {
        try {
            MessageDigest sha256 = MessageDigest.getInstance("SHA-256");
            sha256.update(salt);
            return sha256.digest(password.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this JVM has no SHA-256", e);
        }
    }
}
