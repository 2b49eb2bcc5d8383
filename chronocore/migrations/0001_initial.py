# Tenancy moved here from chronoadmin (Tenant, ApiKey, IdempotencyRecord). The tables exist
# already (chronoadmin 0001 and 0002 created them, and still do on an empty database): this
# migration only takes the models into chronocore's state. Their content types move with them,
# so permissions granted on tenants and API keys, and admin log entries, keep pointing at them.

import django.core.serializers.json
import django.db.models.deletion
import django.utils.timezone
import uuid
from django.db import migrations, models

MOVED_MODELS = ["tenant", "apikey", "idempotencyrecord"]


def move_content_types(from_label, to_label):
    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        db = schema_editor.connection.alias
        ContentType.objects.using(db).filter(app_label=from_label, model__in=MOVED_MODELS).update(
            app_label=to_label
        )

    return move


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('chronoadmin', '0002_api_keys_idempotency'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Tenant',
                    fields=[
                        ('tenant_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('slug', models.SlugField(max_length=64, unique=True)),
                        ('name', models.CharField(max_length=200)),
                        ('is_active', models.BooleanField(default=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'chrono_tenant',
                        'ordering': ['slug'],
                    },
                ),
                migrations.CreateModel(
                    name='ApiKey',
                    fields=[
                        ('key_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('name', models.CharField(blank=True, default='', max_length=200)),
                        ('prefix', models.CharField(editable=False, max_length=12, unique=True)),
                        ('key_hash', models.CharField(editable=False, max_length=64)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='chronocore.tenant')),
                    ],
                    options={
                        'verbose_name': 'API key',
                        'db_table': 'chrono_api_key',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='IdempotencyRecord',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(max_length=200)),
                        ('request_fingerprint', models.CharField(max_length=64)),
                        ('response_status', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('response_body', models.JSONField(blank=True, encoder=django.core.serializers.json.DjangoJSONEncoder, null=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='chronocore.tenant')),
                    ],
                    options={
                        'db_table': 'chrono_idempotency_record',
                        'indexes': [models.Index(fields=['created_at'], name='idempotency_created_idx')],
                        'constraints': [models.UniqueConstraint(fields=('tenant', 'key'), name='idempotency_tenant_key_uniq')],
                    },
                ),
            ],
            database_operations=[
                migrations.RunPython(
                    move_content_types("chronoadmin", "chronocore"),
                    move_content_types("chronocore", "chronoadmin"),
                ),
            ],
        ),
    ]
