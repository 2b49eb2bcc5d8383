# Tenant, ApiKey and IdempotencyRecord now belong to chronocore (its 0001 took them into its
# state, with their tables as they are). They leave chronoadmin's state only: the tables stay.
# This runs after every foreign key to chronoadmin.tenant was repointed at chronocore.tenant.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('chronoadmin', '0002_api_keys_idempotency'),
        ('chronocore', '0001_initial'),
        ('scheduler', '0011_tenant_moved_to_chronocore'),
        ('workflows', '0003_tenant_moved_to_chronocore'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='idempotencyrecord',
                    name='tenant',
                ),
                migrations.DeleteModel(
                    name='ApiKey',
                ),
                migrations.DeleteModel(
                    name='IdempotencyRecord',
                ),
                migrations.DeleteModel(
                    name='Tenant',
                ),
            ],
        ),
    ]
